package deploy

import (
	"encoding/json"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

const prometheusRuleV1 = "monitoring.coreos.com/v1/PrometheusRule"

// promRule is one rule of a PrometheusRule as capscale writes it (alerts
// only), decoded strictly.
type promRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

type prometheusRule struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Groups []struct {
			Name  string     `json:"name"`
			Rules []promRule `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// externalMetrics are the series the alerts read that capscale does not
// export: kube-state-metrics' standard ones (kube_*), kube-apiserver's
// aggregator_unavailable_apiservice (kube-aggregator) and Prometheus' up.
var externalMetrics = map[string]bool{
	"kube_pod_container_resource_requests":      true,
	"kube_pod_status_unschedulable":             true,
	"kube_node_info":                            true,
	"kube_deployment_status_replicas_available": true,
	"aggregator_unavailable_apiservice":         true,
	"up":                                        true,
}

// promQLWords are the PromQL functions, aggregations and keywords the
// alerts use; every other identifier in an expression is a metric name.
var promQLWords = map[string]bool{
	"max": true, "sum": true, "count": true, "and": true, "or": true, "unless": true,
	"absent": true, "increase": true, "vector": true, "rate": true,
}

var (
	promSelector = regexp.MustCompile(`\{[^}]*\}`)
	promGrouping = regexp.MustCompile(`\b(by|on|without|ignoring)\s*\([^)]*\)`)
	promRange    = regexp.MustCompile(`\[[^\]]*\]`)
	promIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	capscaleSel  = regexp.MustCompile(`capscale_[a-z_]+\{([^}]*)\}`)
)

// exprMetrics returns the metric names an expression reads.
func exprMetrics(expr string) []string {
	s := promSelector.ReplaceAllString(expr, " ")
	s = promGrouping.ReplaceAllString(s, " ")
	s = promRange.ReplaceAllString(s, " ")
	var names []string
	for _, id := range promIdent.FindAllString(s, -1) {
		if !promQLWords[id] {
			names = append(names, id)
		}
	}
	return names
}

func balanced(s string) bool {
	var stack []rune
	pairs := map[rune]rune{')': '(', '}': '{', ']': '['}
	for _, r := range s {
		switch r {
		case '(', '{', '[':
			stack = append(stack, r)
		case ')', '}', ']':
			if len(stack) == 0 || stack[len(stack)-1] != pairs[r] {
				return false
			}
			stack = stack[:len(stack)-1]
		}
	}
	return len(stack) == 0
}

// TestHelmPrometheusRule: monitoring.prometheusRule renders one
// PrometheusRule whose alerts fit the install (the mirror's only with
// capacity sources, the publisher's only where the extender publishes, the
// APIService's only where capscale owns it); every expression is balanced
// and reads only metrics capscale's Go code defines or the standard
// kube-state-metrics, kube-apiserver and Prometheus series named in
// externalMetrics, capscale's own in the release's namespace; every alert
// has a severity, a for and a summary and description. Where native
// mode's publisher reads the sources (publisherReads), the mirror's lag is
// its capscale_extender_capacity_sources_synced, not the controller's
// series, which no longer exist, and the controller's outage is only a
// warning. Without the
// PrometheusRule kind the render fails and says how to pass it.
func TestHelmPrometheusRule(t *testing.T) {
	capscaleMetrics, _ := goMetricNames(t)
	base := []string{"--api-versions", mutatingAdmissionPolicyV1, "--api-versions", prometheusRuleV1,
		"--namespace", "infra", "--set", "monitoring.prometheusRule.enabled=true"}
	always := []string{"CapscaleNodeCapacityInvalid", "CapscaleMetricsAdapterDown", "CapscalePodsPendingForUnderlayIPs"}
	for _, tc := range []struct {
		name   string
		args   []string
		alerts []string
		// reads: alert → the metrics its expression reads, all of them.
		reads map[string][]string
		// severity: alert → its severity, where the install decides it.
		severity map[string]string
	}{
		{name: "plugin", alerts: []string{"CapscaleSchedulerDown", "CapscaleControllerDown", "CapscaleExternalMetricsAPIServiceUnavailable"}},
		{name: "extender", args: []string{"--set", "extender.mode=extender", "--set", "apiService.create=false"},
			alerts: []string{"CapscaleSchedulerDown", "CapscaleControllerDown"}},
		{name: "native with sources", args: []string{"--set", "extender.mode=native", "--set", "controller.capacitySources.enabled=true",
			"--set", "monitoring.serviceMonitor.enabled=true", "--api-versions", serviceMonitorV1},
			alerts: []string{"CapscaleSchedulerDown", "CapscaleControllerDown", "CapscaleCapacityMirrorLag",
				"CapscaleCapacityPublisherDown", "CapscaleCapacityPublishFailing", "CapscaleExternalMetricsAPIServiceUnavailable"},
			reads:    map[string][]string{"CapscaleCapacityMirrorLag": {"capscale_extender_capacity_sources_synced"}},
			severity: map[string]string{"CapscaleControllerDown": "warning"}},
		{name: "native with sources, the controller mirroring", args: []string{"--set", "extender.mode=native", "--set", "controller.capacitySources.enabled=true",
			"--set", "controller.capacitySources.publisherReads=false"},
			alerts: []string{"CapscaleSchedulerDown", "CapscaleControllerDown", "CapscaleCapacityMirrorLag",
				"CapscaleCapacityPublisherDown", "CapscaleCapacityPublishFailing", "CapscaleExternalMetricsAPIServiceUnavailable"},
			reads:    map[string][]string{"CapscaleCapacityMirrorLag": {"capscale_controller_capacity_source_nodes", "kube_node_info"}},
			severity: map[string]string{"CapscaleControllerDown": "critical"}},
		{name: "plugin with sources", args: []string{"--set", "controller.capacitySources.enabled=true"},
			alerts:   []string{"CapscaleSchedulerDown", "CapscaleControllerDown", "CapscaleCapacityMirrorLag", "CapscaleExternalMetricsAPIServiceUnavailable"},
			reads:    map[string][]string{"CapscaleCapacityMirrorLag": {"capscale_controller_capacity_source_nodes", "kube_node_info"}},
			severity: map[string]string{"CapscaleControllerDown": "critical"}},
		{name: "dra", args: []string{"--set", "extender.mode=dra"},
			alerts: []string{"CapscaleSchedulerDown", "CapscaleControllerDown", "CapscaleExternalMetricsAPIServiceUnavailable", "CapscaleDRAKubeletPluginMissing"}},
		{name: "dra without the kubelet plugin", args: []string{"--set", "extender.mode=dra", "--set", "extender.kubeletPlugin.enabled=false", "--set", "extender.extraArgs={--skip-node-operations}"},
			alerts: []string{"CapscaleSchedulerDown", "CapscaleControllerDown", "CapscaleExternalMetricsAPIServiceUnavailable"}},
		{name: "no scheduler, no controller", args: []string{"--set", "scheduler.enabled=false", "--set", "controller.enabled=false"},
			alerts: []string{"CapscaleExternalMetricsAPIServiceUnavailable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := helmTemplate(t, append(append(slices.Clone(base), tc.args...),
				"--set", "monitoring.prometheusRule.additionalLabels.release=kube-prometheus-stack",
				"--set", "monitoring.prometheusRule.pendingFor=7m")...)
			if err != nil {
				t.Fatal(err)
			}
			o, ok := r[objectKey("PrometheusRule", "infra", "capscale")]
			if !ok {
				t.Fatalf("no PrometheusRule infra/capscale; rendered %v", r.keys())
			}
			b, _ := json.Marshal(o.raw)
			dec := json.NewDecoder(strings.NewReader(string(b)))
			dec.DisallowUnknownFields()
			var pr prometheusRule
			if err := dec.Decode(&pr); err != nil {
				t.Fatalf("not a PrometheusRule as capscale writes it: %v", err)
			}
			if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Metadata.Labels["release"] != "kube-prometheus-stack" {
				t.Errorf("apiVersion %s, labels %v", pr.APIVersion, pr.Metadata.Labels)
			}
			var got []string
			for _, g := range pr.Spec.Groups {
				for _, rule := range g.Rules {
					got = append(got, rule.Alert)
					checkAlert(t, rule, capscaleMetrics, "infra")
					if rule.Alert == "CapscalePodsPendingForUnderlayIPs" && rule.For != "7m" {
						t.Errorf("%s: for %q, want pendingFor 7m", rule.Alert, rule.For)
					}
					if want, ok := tc.reads[rule.Alert]; ok {
						got := exprMetrics(rule.Expr)
						slices.Sort(got)
						if got = slices.Compact(got); !slices.Equal(got, want) {
							t.Errorf("%s reads %v, want %v", rule.Alert, got, want)
						}
					}
					if s, ok := tc.severity[rule.Alert]; ok && rule.Labels["severity"] != s {
						t.Errorf("%s: severity %q, want %q", rule.Alert, rule.Labels["severity"], s)
					}
				}
			}
			want := append(slices.Clone(always), tc.alerts...)
			sort.Strings(want)
			sort.Strings(got)
			if !slices.Equal(got, want) {
				t.Errorf("alerts %v, want %v", got, want)
			}
		})
	}
	if _, err := helmTemplate(t, "--api-versions", mutatingAdmissionPolicyV1, "--set", "monitoring.prometheusRule.enabled=true"); err == nil ||
		!strings.Contains(err.Error(), "--api-versions "+prometheusRuleV1) {
		t.Errorf("without the PrometheusRule kind: %v, want a failure naming --api-versions %s", err, prometheusRuleV1)
	}
	r, err := helmTemplate(t)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range r.keys() {
		if strings.HasPrefix(k, "PrometheusRule ") {
			t.Errorf("%s rendered by default", k)
		}
	}
}

func checkAlert(t *testing.T, rule promRule, capscaleMetrics map[string]bool, namespace string) {
	t.Helper()
	if !strings.HasPrefix(rule.Alert, "Capscale") || rule.Expr == "" || !balanced(rule.Expr) {
		t.Errorf("%s: malformed expression %q", rule.Alert, rule.Expr)
	}
	if _, err := time.ParseDuration(rule.For); err != nil {
		t.Errorf("%s: for %q: %v", rule.Alert, rule.For, err)
	}
	if s := rule.Labels["severity"]; s != "warning" && s != "critical" {
		t.Errorf("%s: severity %q", rule.Alert, s)
	}
	if rule.Annotations["summary"] == "" || rule.Annotations["description"] == "" {
		t.Errorf("%s: annotations %v", rule.Alert, rule.Annotations)
	}
	metrics := exprMetrics(rule.Expr)
	if len(metrics) == 0 {
		t.Errorf("%s reads no metric: %q", rule.Alert, rule.Expr)
	}
	for _, m := range metrics {
		if !capscaleMetrics[m] && !externalMetrics[m] {
			t.Errorf("%s reads %s, which neither capscale's code defines nor externalMetrics lists", rule.Alert, m)
		}
	}
	for _, sel := range capscaleSel.FindAllStringSubmatch(rule.Expr, -1) {
		if !strings.Contains(sel[1], `namespace="`+namespace+`"`) {
			t.Errorf("%s: %s does not select namespace %s", rule.Alert, sel[0], namespace)
		}
	}
}
