package plane

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestNotReadyTainted: only kube-controller-manager's not-ready and
// unreachable NoSchedule taints hold the plane back.
func TestNotReadyTainted(t *testing.T) {
	for _, tc := range []struct {
		name   string
		taints []corev1.Taint
		want   bool
	}{
		{"none", nil, false},
		{"not ready", []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}}, true},
		{"unreachable", []corev1.Taint{{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule}}, true},
		{"not ready, NoExecute only", []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute}}, false},
		{"a test's own taint", []corev1.Taint{{Key: "example.com/dedicated", Effect: corev1.TaintEffectNoSchedule}}, false},
	} {
		if got := NotReadyTainted(&corev1.Node{Spec: corev1.NodeSpec{Taints: tc.taints}}); got != tc.want {
			t.Errorf("%s: NotReadyTainted = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestSaveLogs: every component's log is copied once, a restarted
// process's shared file included.
func TestSaveLogs(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "logs")
	write := func(name, body string) string {
		f := filepath.Join(src, name)
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	a, b := write("a.log", "first start\nrestart\n"), write("b.log", "b\n")
	p := &Plane{procs: []*Process{{Name: "a", LogFile: a}, {Name: "b", LogFile: b}, {Name: "a", LogFile: a}}}
	if err := p.SaveLogs(dst); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"a.log": "first start\nrestart\n", "b.log": "b\n"} {
		got, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil || string(got) != want {
			t.Errorf("%s: %q, %v; want %q", name, got, err, want)
		}
	}
	p.procs = append(p.procs, &Process{Name: "gone", LogFile: filepath.Join(src, "missing.log")})
	if err := p.SaveLogs(dst); err == nil {
		t.Error("a missing log was not reported")
	}
}
