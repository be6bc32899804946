package deploy

import (
	"reflect"
	"testing"
)

// TestHelmServiceMonitorKnobs: monitoring.serviceMonitor's additionalLabels
// (the name KEDA's and metrics-server's charts use; the older labels are
// merged over them), scrapeTimeout, relabelings and metricRelabelings reach
// every ServiceMonitor and every endpoint of it, in every mode; by default
// an endpoint has none of them.
func TestHelmServiceMonitorKnobs(t *testing.T) {
	served := []string{"--api-versions", mutatingAdmissionPolicyV1, "--api-versions", serviceMonitorV1}
	relabel := []smRelabel{{SourceLabels: []string{"__meta_kubernetes_pod_node_name"}, TargetLabel: "node", Action: "replace"}}
	metricRelabel := []smRelabel{{SourceLabels: []string{"__name__"}, Regex: "go_.*", Action: "drop"}}
	for _, mode := range []string{"extender", "native", "plugin"} {
		t.Run(mode, func(t *testing.T) {
			r, err := helmTemplate(t, append(served, "--set", "extender.mode="+mode, "-f", writeValues(t, `
monitoring:
  serviceMonitor:
    enabled: true
    additionalLabels: {release: kube-prometheus-stack, team: a}
    labels: {team: b}
    scrapeTimeout: 20s
    relabelings: [{sourceLabels: [__meta_kubernetes_pod_node_name], targetLabel: node, action: replace}]
    metricRelabelings: [{sourceLabels: [__name__], regex: "go_.*", action: drop}]
`))...)
			if err != nil {
				t.Fatal(err)
			}
			monitors := serviceMonitors(t, r)
			if len(monitors) < 3 {
				t.Fatalf("%d ServiceMonitors", len(monitors))
			}
			for _, sm := range monitors {
				if l := sm.Metadata.Labels; l["release"] != "kube-prometheus-stack" || l["team"] != "b" {
					t.Errorf("%s: labels %v, want additionalLabels with labels over them", sm.Metadata.Name, l)
				}
				for _, ep := range sm.Spec.Endpoints {
					if ep.ScrapeTimeout != "20s" || !reflect.DeepEqual(ep.Relabelings, relabel) || !reflect.DeepEqual(ep.MetricRelabelings, metricRelabel) {
						t.Errorf("%s port %s: scrapeTimeout %q, relabelings %+v, metricRelabelings %+v", sm.Metadata.Name, ep.Port, ep.ScrapeTimeout, ep.Relabelings, ep.MetricRelabelings)
					}
				}
			}
		})
	}
	r, err := helmTemplate(t, append(served, "--set", "monitoring.serviceMonitor.enabled=true")...)
	if err != nil {
		t.Fatal(err)
	}
	for _, sm := range serviceMonitors(t, r) {
		for _, ep := range sm.Spec.Endpoints {
			if ep.ScrapeTimeout != "" || ep.Relabelings != nil || ep.MetricRelabelings != nil {
				t.Errorf("%s port %s: by default scrapeTimeout %q, relabelings %v, metricRelabelings %v", sm.Metadata.Name, ep.Port, ep.ScrapeTimeout, ep.Relabelings, ep.MetricRelabelings)
			}
		}
	}
}
