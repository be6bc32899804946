package deploy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestGrafanaServiceMonitors: each ServiceMonitor of deploy/monitoring/
// selects exactly one Service of deploy/ or deploy/monitoring/ that has its
// port and reaches a named container port of a capscale pod; TLS is verified
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
	const servingSecret = "capscale-serving-cert"

	type endpoint struct {
		Port, Scheme, Path string
		Authorization      *struct {
			Type        string
			Credentials struct{ Name, Key string }
		}
		TLSConfig *struct {
			ServerName string
			CA         struct{ Secret *struct{ Name, Key string } }
		} `json:"tlsConfig"`
	}
	type serviceMonitor struct {
		Metadata struct{ Name, Namespace string }
		Spec     struct {
			Selector  struct{ MatchLabels map[string]string }
			Endpoints []endpoint
		}
	}
	var monitors []serviceMonitor
	for _, k := range mon.keys() {
		if !strings.HasPrefix(k, "ServiceMonitor ") {
			continue
		}
		b, _ := json.Marshal(mon[k].raw)
		var sm serviceMonitor
		if err := json.Unmarshal(b, &sm); err != nil {
			t.Fatal(err)
		}
		monitors = append(monitors, sm)
	}
	if len(monitors) != 3 {
		t.Fatalf("want ServiceMonitors for the adapter, the extender and the workload API, got %d", len(monitors))
	}
	matches := func(sel, labels map[string]string) bool {
		for k, v := range sel {
			if labels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	for _, sm := range monitors {
		t.Run(sm.Metadata.Name, func(t *testing.T) {
			var svcs []*corev1.Service
			for _, k := range all.keys() {
				if s, ok := all[k].typed.(*corev1.Service); ok && s.Namespace == sm.Metadata.Namespace && matches(sm.Spec.Selector.MatchLabels, s.Labels) {
					svcs = append(svcs, s)
				}
			}
			if len(svcs) != 1 {
				t.Fatalf("selects %d Services, want 1", len(svcs))
			}
			svc := svcs[0]
			if len(sm.Spec.Endpoints) != 1 {
				t.Fatalf("%d endpoints, want 1", len(sm.Spec.Endpoints))
			}
			ep := sm.Spec.Endpoints[0]
			var port *corev1.ServicePort
			for i := range svc.Spec.Ports {
				if svc.Spec.Ports[i].Name == ep.Port {
					port = &svc.Spec.Ports[i]
				}
			}
			if port == nil {
				t.Fatalf("Service %s has no port %q", svc.Name, ep.Port)
			}
			// The Service's target port is a named port of a capscale pod.
			found := false
			for _, k := range all.keys() {
				d, ok := all[k].typed.(*appsv1.Deployment)
				if !ok || !matches(svc.Spec.Selector, d.Spec.Template.Labels) {
					continue
				}
				for _, c := range d.Spec.Template.Spec.Containers {
					for _, p := range c.Ports {
						if p.Name == port.TargetPort.String() {
							found = true
						}
					}
				}
			}
			if !found {
				t.Errorf("no pod selected by Service %s has a port named %s", svc.Name, port.TargetPort.String())
			}
			if ep.Path != "/metrics" {
				t.Errorf("path %q", ep.Path)
			}
			if ep.Scheme == "https" {
				wantName := svc.Name + "." + svc.Namespace + ".svc"
				if ep.TLSConfig == nil || ep.TLSConfig.ServerName != wantName || ep.TLSConfig.CA.Secret == nil ||
					ep.TLSConfig.CA.Secret.Name != servingSecret || ep.TLSConfig.CA.Secret.Key != "ca.crt" {
					t.Errorf("https without verification against %s/ca.crt for %s: %+v", servingSecret, wantName, ep.TLSConfig)
				}
			}
			if a := ep.Authorization; a != nil {
				secret := get[*corev1.Secret](t, all, objectKey("Secret", sm.Metadata.Namespace, a.Credentials.Name))
				sa := secret.Annotations[corev1.ServiceAccountNameKey]
				if secret.Type != corev1.SecretTypeServiceAccountToken || a.Credentials.Key != corev1.ServiceAccountTokenKey || a.Type != "Bearer" {
					t.Errorf("authorization %+v with Secret of type %s", a, secret.Type)
				}
				if !serviceAccountMayGetMetrics(all, sm.Metadata.Namespace, sa) {
					t.Errorf("ServiceAccount %s may not get /metrics", sa)
				}
			}
		})
	}
	if sm := monitors[slices.IndexFunc(monitors, func(sm serviceMonitor) bool { return sm.Metadata.Name == "capscale-metrics-adapter" })]; sm.Spec.Endpoints[0].Authorization == nil {
		t.Errorf("the adapter authorizes /metrics: its ServiceMonitor must send a token")
	}

	cm := get[*corev1.ConfigMap](t, mon, objectKey("ConfigMap", "capscale-system", "capscale-grafana-dashboard"))
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "monitoring", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data["grafana-dashboard.json"] != string(b) || cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("the dashboard ConfigMap does not carry grafana-dashboard.json with label grafana_dashboard=1")
	}
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
