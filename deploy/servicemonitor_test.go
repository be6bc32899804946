package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// serviceMonitor is the part of prometheus-operator's ServiceMonitor that
// capscale writes, field for field as in prometheus-operator v0.95.2
// (pkg/apis/monitoring/v1: servicemonitor_types.go:47-113, Endpoint in
// types.go:577, authorization and tlsConfig through
// HTTPConfigWithProxyAndTLSFiles in http_config.go:27, SafeTLSConfig in
// tls_types.go:117, SecretOrConfigMap in types.go:786). Rendered monitors
// are decoded strictly against it: a field prometheus-operator does not
// have fails the test rather than being dropped by the apiserver.
type serviceMonitor struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Endpoints []smEndpoint `json:"endpoints"`
	} `json:"spec"`
}

type smEndpoint struct {
	Port          string `json:"port"`
	Scheme        string `json:"scheme"`
	Path          string `json:"path"`
	Interval      string `json:"interval"`
	ScrapeTimeout string `json:"scrapeTimeout"`
	HonorLabels   bool   `json:"honorLabels"`
	// RelabelConfig (types.go), with the fields values.schema.json allows.
	Relabelings       []smRelabel `json:"relabelings"`
	MetricRelabelings []smRelabel `json:"metricRelabelings"`
	Authorization     *struct {
		Type        string                    `json:"type"`
		Credentials *corev1.SecretKeySelector `json:"credentials"`
	} `json:"authorization"`
	TLSConfig *struct {
		ServerName         string `json:"serverName"`
		InsecureSkipVerify bool   `json:"insecureSkipVerify"`
		CA                 struct {
			Secret *corev1.SecretKeySelector `json:"secret"`
		} `json:"ca"`
	} `json:"tlsConfig"`
}

// smRelabel is prometheus-operator's RelabelConfig.
type smRelabel struct {
	SourceLabels []string `json:"sourceLabels"`
	Separator    string   `json:"separator"`
	TargetLabel  string   `json:"targetLabel"`
	Regex        string   `json:"regex"`
	Modulus      uint64   `json:"modulus"`
	Replacement  string   `json:"replacement"`
	Action       string   `json:"action"`
}

// serviceMonitors decodes the ServiceMonitors of a render strictly.
func serviceMonitors(t *testing.T, r rendered) []serviceMonitor {
	t.Helper()
	var monitors []serviceMonitor
	for _, k := range r.keys() {
		if !strings.HasPrefix(k, "ServiceMonitor ") {
			continue
		}
		b, _ := json.Marshal(r[k].raw)
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		var sm serviceMonitor
		if err := dec.Decode(&sm); err != nil {
			t.Errorf("%s is not a prometheus-operator v0.95.2 ServiceMonitor as capscale writes it: %v", k, err)
			continue
		}
		if sm.APIVersion != "monitoring.coreos.com/v1" {
			t.Errorf("%s: apiVersion %s", k, sm.APIVersion)
		}
		monitors = append(monitors, sm)
	}
	return monitors
}

// scrapeTarget is a container port a ServiceMonitor scrapes.
type scrapeTarget struct {
	deployment, container string
	port                  int32
}

func (s scrapeTarget) String() string {
	return fmt.Sprintf("%s/%s:%d", s.deployment, s.container, s.port)
}

// checkServiceMonitors checks that each ServiceMonitor's endpoints reach
// containers of the render's Deployments through exactly one Service, on
// /metrics, with the scheme the container's probes use on that port; that
// HTTPS is verified against servingSecret's ca.crt for the Service's name
// (kube-scheduler, whose certificate is self-signed in memory, alone may
// skip verification); that a token comes from a ServiceAccount allowed to
// get /metrics; and returns every container port scraped, with whether a
// token is sent.
func checkServiceMonitors(t *testing.T, all rendered, monitors []serviceMonitor, servingSecret string) map[scrapeTarget]bool {
	t.Helper()
	scraped := map[scrapeTarget]bool{}
	matches := func(sel, labels map[string]string) bool {
		for k, v := range sel {
			if labels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	for _, sm := range monitors {
		var svcs []*corev1.Service
		for _, k := range all.keys() {
			if s, ok := all[k].typed.(*corev1.Service); ok && s.Namespace == sm.Metadata.Namespace && matches(sm.Spec.Selector.MatchLabels, s.Labels) {
				svcs = append(svcs, s)
			}
		}
		if len(svcs) != 1 {
			t.Errorf("ServiceMonitor %s selects %d Services, want 1", sm.Metadata.Name, len(svcs))
			continue
		}
		svc := svcs[0]
		if len(sm.Spec.Endpoints) == 0 {
			t.Errorf("ServiceMonitor %s has no endpoint", sm.Metadata.Name)
		}
		for _, ep := range sm.Spec.Endpoints {
			where := sm.Metadata.Name + " port " + ep.Port
			i := slices.IndexFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port })
			if i < 0 {
				t.Errorf("%s: Service %s has no such port", where, svc.Name)
				continue
			}
			target := svc.Spec.Ports[i].TargetPort
			if ep.Path != "/metrics" {
				t.Errorf("%s: path %q", where, ep.Path)
			}
			// The container behind the Service's target port, and the scheme
			// its probes use there.
			var reached []scrapeTarget
			for _, k := range all.keys() {
				d, ok := all[k].typed.(*appsv1.Deployment)
				if !ok || d.Namespace != svc.Namespace || !matches(svc.Spec.Selector, d.Spec.Template.Labels) {
					continue
				}
				for _, c := range d.Spec.Template.Spec.Containers {
					for _, p := range c.Ports {
						if target.Type == intstr.String && p.Name != target.StrVal || target.Type == intstr.Int && p.ContainerPort != target.IntVal {
							continue
						}
						reached = append(reached, scrapeTarget{d.Name, c.Name, p.ContainerPort})
						if want := probeScheme(c, p); !strings.EqualFold(ep.Scheme, want) {
							t.Errorf("%s: scheme %q, but %s/%s's probes use %s on port %d", where, ep.Scheme, d.Name, c.Name, want, p.ContainerPort)
						}
					}
				}
			}
			if len(reached) != 1 {
				t.Errorf("%s: Service %s's target port %s reaches %v, want one container port", where, svc.Name, target.String(), reached)
				continue
			}
			if ep.Scheme == "https" {
				wantName := svc.Name + "." + svc.Namespace + ".svc"
				tls := ep.TLSConfig
				switch {
				case tls != nil && tls.InsecureSkipVerify:
					if reached[0].container != "kube-scheduler" {
						t.Errorf("%s: skips TLS verification of %s, which serves a certificate capscale can verify", where, reached[0])
					}
				case tls == nil || tls.ServerName != wantName || tls.CA.Secret == nil || tls.CA.Secret.Name != servingSecret || tls.CA.Secret.Key != "ca.crt":
					t.Errorf("%s: https without verification against %s/ca.crt for %s: %+v", where, servingSecret, wantName, tls)
				}
			}
			if a := ep.Authorization; a != nil {
				secret := get[*corev1.Secret](t, all, objectKey("Secret", sm.Metadata.Namespace, a.Credentials.Name))
				sa := secret.Annotations[corev1.ServiceAccountNameKey]
				if secret.Type != corev1.SecretTypeServiceAccountToken || a.Credentials.Key != corev1.ServiceAccountTokenKey || a.Type != "Bearer" {
					t.Errorf("%s: authorization %+v with Secret of type %s", where, a, secret.Type)
				}
				if !serviceAccountMayGetMetrics(all, sm.Metadata.Namespace, sa) {
					t.Errorf("%s: ServiceAccount %s may not get /metrics", where, sa)
				}
			}
			scraped[reached[0]] = ep.Authorization != nil
		}
	}
	return scraped
}

// probeScheme is the scheme of the container's probes on port p (HTTP
// when none names it).
func probeScheme(c corev1.Container, p corev1.ContainerPort) string {
	for _, pr := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		if pr == nil || pr.HTTPGet == nil {
			continue
		}
		port := pr.HTTPGet.Port
		if port.Type == intstr.String && port.StrVal == p.Name || port.Type == intstr.Int && port.IntVal == p.ContainerPort {
			if pr.HTTPGet.Scheme != "" {
				return string(pr.HTTPGet.Scheme)
			}
		}
	}
	return string(corev1.URISchemeHTTP)
}

// probedPorts is every container port of the render's Deployments that
// the container's probes use: every capscale server serves /metrics there.
func probedPorts(all rendered) []scrapeTarget {
	var out []scrapeTarget
	for _, k := range all.keys() {
		d, ok := all[k].typed.(*appsv1.Deployment)
		if !ok {
			continue
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, p := range c.Ports {
				for _, pr := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
					if pr != nil && pr.HTTPGet != nil && (pr.HTTPGet.Port.StrVal == p.Name && p.Name != "" || pr.HTTPGet.Port.IntVal == p.ContainerPort) {
						out = append(out, scrapeTarget{d.Name, c.Name, p.ContainerPort})
						break
					}
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b scrapeTarget) int { return strings.Compare(a.String(), b.String()) })
	return slices.Compact(out)
}

// TestGrafanaServiceMonitors: each ServiceMonitor of deploy/monitoring/
// selects exactly one Service of deploy/ or deploy/monitoring/ that has its
// port and reaches a container port of a capscale pod; TLS is verified
// with the serving CA for the Service's name; the adapter's scrape token
// may get /metrics; the dashboard ConfigMap carries grafana-dashboard.json.
func TestGrafanaServiceMonitors(t *testing.T) {
	install := kustomize(t, "deploy")
	mon := kustomize(t, filepath.Join("deploy", "monitoring"))
	all := rendered{}
	for _, r := range []rendered{install, mon} {
		for k, o := range r {
			all[k] = o
		}
	}
	monitors := serviceMonitors(t, mon)
	if len(monitors) != 3 {
		t.Fatalf("want ServiceMonitors for the adapter, the extender and the workload API, got %d", len(monitors))
	}
	scraped := checkServiceMonitors(t, all, monitors, "capscale-serving-cert")
	if !scraped[scrapeTarget{"capscale-metrics-adapter", "metrics-adapter", 6443}] {
		t.Errorf("the adapter authorizes /metrics: its ServiceMonitor must send a token (scraped: %v)", scraped)
	}
	checkDashboardConfigMap(t, get[*corev1.ConfigMap](t, mon, objectKey("ConfigMap", "capscale-system", "capscale-grafana-dashboard")))
}

func checkDashboardConfigMap(t *testing.T, cm *corev1.ConfigMap) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "monitoring", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data["grafana-dashboard.json"] != string(b) || cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("the dashboard ConfigMap does not carry grafana-dashboard.json with label grafana_dashboard=1")
	}
}

// serviceMonitorV1 is what helm template must be told the cluster serves
// for the chart's monitoring (Argo CD passes the cluster's API versions).
const serviceMonitorV1 = "monitoring.coreos.com/v1/ServiceMonitor"

// TestHelmMonitoring: with monitoring.serviceMonitor on, in every mode,
// every port a capscale container is probed on (each serves /metrics there)
// is scraped exactly as checkServiceMonitors requires, kube-scheduler's and
// the adapter's with the scraper's token; everything is in the chart's
// namespace. Off by default; on without the CRD served, the render fails
// saying so. The dashboard option carries deploy/monitoring's JSON.
func TestHelmMonitoring(t *testing.T) {
	served := []string{"--kube-version", newestKubernetes(t), "--api-versions", mutatingAdmissionPolicyV1, "--api-versions", serviceMonitorV1}
	for _, mode := range []string{"extender", "native", "plugin"} {
		t.Run(mode, func(t *testing.T) {
			r, err := helmTemplate(t, append(served, "--namespace", "infra", "--set", "extender.mode="+mode, "-f", writeValues(t, `
tls: {secretName: my-serving-cert}
monitoring: {serviceMonitor: {enabled: true, labels: {release: kube-prometheus-stack}, interval: 15s}}
`))...)
			if err != nil {
				t.Fatal(err)
			}
			monitors := serviceMonitors(t, r)
			for _, sm := range monitors {
				if sm.Metadata.Namespace != "infra" || sm.Metadata.Labels["release"] != "kube-prometheus-stack" {
					t.Errorf("ServiceMonitor %s in namespace %q with labels %v", sm.Metadata.Name, sm.Metadata.Namespace, sm.Metadata.Labels)
				}
				for _, ep := range sm.Spec.Endpoints {
					if ep.Interval != "15s" {
						t.Errorf("ServiceMonitor %s port %s: interval %q", sm.Metadata.Name, ep.Port, ep.Interval)
					}
				}
			}
			scraped := checkServiceMonitors(t, r, monitors, "my-serving-cert")
			probed := probedPorts(r)
			if len(probed) < 4 {
				t.Fatalf("only %v are probed", probed)
			}
			for _, p := range probed {
				tokenSent, ok := scraped[p]
				if !ok {
					t.Errorf("%s serves /metrics and is not scraped", p)
				}
				// The adapter and kube-scheduler authorize /metrics.
				if wantToken := p.container == "metrics-adapter" || p.container == "kube-scheduler"; ok && tokenSent != wantToken {
					t.Errorf("%s: token sent %v, want %v", p, tokenSent, wantToken)
				}
			}
			if len(scraped) != len(probed) {
				t.Errorf("scraped %v, want exactly %v", scraped, probed)
			}
		})
	}

	r, err := helmTemplate(t)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range r.keys() {
		if strings.HasPrefix(k, "ServiceMonitor ") || strings.Contains(k, "metrics-scraper") || strings.Contains(k, "grafana") {
			t.Errorf("rendered by default: %s", k)
		}
	}
	if _, err := helmTemplate(t, "--set", "monitoring.serviceMonitor.enabled=true"); err == nil ||
		!strings.Contains(err.Error(), "does not serve monitoring.coreos.com/v1 ServiceMonitor") {
		t.Errorf("serviceMonitor on a cluster without the CRD: %v, want a refusal naming it", err)
	}

	// The chart carries its own copy (Helm reads no file outside the chart,
	// kustomize none outside deploy/monitoring, and a link makes helm warn
	// on its output): the same bytes.
	chartCopy, err := os.ReadFile(filepath.Join(chartDir(t), "dashboards", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if own, _ := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "monitoring", "grafana-dashboard.json")); !bytes.Equal(chartCopy, own) {
		t.Errorf("deploy/helm/capscale/dashboards/grafana-dashboard.json differs from deploy/monitoring's: cp deploy/monitoring/grafana-dashboard.json deploy/helm/capscale/dashboards/")
	}
	r, err = helmTemplate(t, "--set", "monitoring.grafanaDashboard.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	checkDashboardConfigMap(t, get[*corev1.ConfigMap](t, r, objectKey("ConfigMap", "capscale-system", "capscale-grafana-dashboard")))
}

// serviceAccountMayGetMetrics reports whether a ClusterRoleBinding grants
// namespace/name `get` on the non-resource URL /metrics.
func serviceAccountMayGetMetrics(r rendered, namespace, name string) bool {
	for _, k := range r.keys() {
		crb, ok := r[k].typed.(*rbacv1.ClusterRoleBinding)
		if !ok || !slices.ContainsFunc(crb.Subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Namespace == namespace && s.Name == name
		}) {
			continue
		}
		role, ok := r[objectKey("ClusterRole", "", crb.RoleRef.Name)].typed.(*rbacv1.ClusterRole)
		if !ok {
			continue
		}
		for _, rule := range role.Rules {
			if slices.Contains(rule.NonResourceURLs, "/metrics") && slices.Contains(rule.Verbs, "get") {
				return true
			}
		}
	}
	return false
}
