package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	configv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"

	"github.com/capscale/capscale/e2e/plane"
)

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want spread
	}{
		{[]float64{3}, spread{3, 3, 3}},
		{[]float64{5, 1, 3}, spread{3, 1, 5}},
		{[]float64{4, 1, 3, 2}, spread{2.5, 1, 4}},
	} {
		in := append([]float64(nil), tc.in...)
		if got := summarize(tc.in); got != tc.want {
			t.Errorf("summarize(%v) = %+v, want %+v", tc.in, got, tc.want)
		}
		for i := range in {
			if in[i] != tc.in[i] {
				t.Fatalf("summarize reordered its input: %v", tc.in)
			}
		}
	}
	if got := summarize(nil); !math.IsNaN(got.Median) {
		t.Errorf("summarize(nil) = %+v, want NaN", got)
	}
}

func TestPairedRatios(t *testing.T) {
	got := pairedRatios([]float64{80, 90, 100}, []float64{100, 100})
	want := []float64{0.8, 0.9}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("pairedRatios = %v, want %v", got, want)
	}
	if got := pairedRatios([]float64{1}, []float64{0}); len(got) != 0 {
		t.Errorf("a zero denominator must not pair, got %v", got)
	}
}

func TestSidesAlternate(t *testing.T) {
	firsts := map[string]int{}
	for r := 0; r < 8; r++ {
		s := sidesOfRound(r, "a", "b")
		if s[0] == s[1] {
			t.Fatalf("round %d runs one side twice: %v", r, s)
		}
		firsts[s[0]]++
	}
	if firsts["a"] != 4 || firsts["b"] != 4 {
		t.Errorf("each side must go first in half the rounds, got %v", firsts)
	}
}

func TestCPUMsPerPod(t *testing.T) {
	before := cpuTimes{"kube-scheduler": 10 * time.Second, "kwok": 5 * time.Second, "gone": 0}
	after := cpuTimes{"kube-scheduler": 12 * time.Second, "kwok": 5*time.Second + 100*time.Millisecond, "new": time.Second}
	// 10 s of wall: the scheduler idles at 0.05 (0.5 s), kwok at 0.02 (0.2 s).
	idle := map[string]float64{"kube-scheduler": 0.05, "kwok": 0.02}
	got := cpuMsPerPod(before, after, 10*time.Second, idle, 500)
	if v := got["kube-scheduler"]; math.Abs(v-3) > 1e-9 { // (2 s - 0.5 s) / 500 pods
		t.Errorf("kube-scheduler = %v ms/pod, want 3", v)
	}
	if v, ok := got["kwok"]; !ok || v != 0 {
		t.Errorf("kwok below its idle rate must be charged 0, got %v (present %v)", v, ok)
	}
	if _, ok := got["new"]; ok {
		t.Error("a process without a before sample must not be charged")
	}
	if len(cpuMsPerPod(before, after, time.Second, idle, 0)) != 0 {
		t.Error("no pods, no figures")
	}
}

func TestIdleAndQuiet(t *testing.T) {
	a := cpuTimes{"kube-apiserver": time.Second}
	b := cpuTimes{"kube-apiserver": time.Second + 200*time.Millisecond}
	idle := idleRates(a, b, 2*time.Second)
	if v := idle["kube-apiserver"]; math.Abs(v-0.1) > 1e-9 {
		t.Fatalf("idle = %v, want 0.1", v)
	}
	if !quietEnough(0.16, 0.1) {
		t.Error("0.16 against an idle 0.1 is within 1.5×idle + 0.02")
	}
	if quietEnough(0.3, 0.1) {
		t.Error("0.3 against an idle 0.1 is a busy plane")
	}
}

func TestNodeUsable(t *testing.T) {
	ready := corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}
	for _, tc := range []struct {
		name string
		node corev1.Node
		want bool
	}{
		{"ready", corev1.Node{Status: ready}, true},
		{"not ready", corev1.Node{}, false},
		{"not-ready taint left", corev1.Node{Status: ready, Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule}}}}, false},
		{"prefer-no-schedule is fine", corev1.Node{Status: ready, Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "x", Effect: corev1.TaintEffectPreferNoSchedule}}}}, true},
		{"cordoned", corev1.Node{Status: ready, Spec: corev1.NodeSpec{Unschedulable: true}}, false},
	} {
		if got := nodeUsable(&tc.node); got != tc.want {
			t.Errorf("%s: nodeUsable = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestPodReady(t *testing.T) {
	readyCond := []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if podReady(&corev1.Pod{Status: corev1.PodStatus{Conditions: readyCond}}) {
		t.Error("an unbound pod is not done")
	}
	if !podReady(&corev1.Pod{Spec: corev1.PodSpec{NodeName: "n"}, Status: corev1.PodStatus{Conditions: readyCond}}) {
		t.Error("bound and Ready is done")
	}
	if podReady(&corev1.Pod{Spec: corev1.PodSpec{NodeName: "n"}}) {
		t.Error("bound without Ready is not done")
	}
}

func TestQuantile(t *testing.T) {
	// 100 observations: 50 ≤ 0.01, 90 ≤ 0.1, 100 ≤ 1.
	bs := []bucket{{1, 100}, {0.01, 50}, {0.1, 90}, {math.Inf(1), 100}}
	if got := quantile(0.5, bs); math.Abs(got-0.01) > 1e-12 {
		t.Errorf("p50 = %v, want 0.01", got)
	}
	if got := quantile(0.99, bs); math.Abs(got-(0.1+0.9*0.9)) > 1e-12 {
		t.Errorf("p99 = %v, want 0.91", got)
	}
	if got := quantile(0.99, []bucket{{0.1, 50}, {math.Inf(1), 100}}); got != 0.1 {
		t.Errorf("a quantile in +Inf is the last finite bound, got %v", got)
	}
	if got := quantile(0.5, []bucket{{0.1, 0}, {math.Inf(1), 0}}); !math.IsNaN(got) {
		t.Errorf("no observations is NaN, got %v", got)
	}
}

func TestBucketDelta(t *testing.T) {
	got := bucketDelta([]bucket{{0.1, 10}, {math.Inf(1), 12}}, []bucket{{0.1, 15}, {math.Inf(1), 30}})
	if got[0].count != 5 || got[1].count != 18 {
		t.Errorf("delta = %v, want 5 and 18", got)
	}
}

func TestHistogramBucketsFromScrape(t *testing.T) {
	text := `# TYPE h histogram
h_bucket{route="/bind",le="0.1"} 3
h_bucket{route="/bind",le="+Inf"} 4
h_sum{route="/bind"} 0.5
h_count{route="/bind"} 4
h_bucket{route="/filter",le="0.1"} 7
h_bucket{route="/filter",le="+Inf"} 7
h_sum{route="/filter"} 0.1
h_count{route="/filter"} 7
# TYPE c counter
c{verb="POST",resource="pods",subresource="binding"} 2
c{verb="GET",resource="pods"} 1
`
	f, err := parseMetrics([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	bind := f.histogramBuckets("h", map[string]string{"route": "/bind"})
	if countOf(bind) != 4 {
		t.Errorf("bind observations = %v, want 4", countOf(bind))
	}
	if all := f.histogramBuckets("h", nil); countOf(all) != 11 {
		t.Errorf("all observations = %v, want 11", countOf(all))
	}
	c := f.counters("c", "verb", "resource", "subresource")
	if c["POST/pods/binding"] != 2 || c["GET/pods"] != 1 {
		t.Errorf("counters = %v", c)
	}
}

func TestProcCPU(t *testing.T) {
	// Burn some CPU so the reading cannot be a constant zero.
	deadline := time.Now().Add(50 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = x * x
	}
	d, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if d <= 0 {
		t.Errorf("procCPU of a busy process = %v", d)
	}
	if _, err := procCPU(-1); err == nil {
		t.Error("no such process must be an error")
	}
}

func TestCheckNodeLease(t *testing.T) {
	for d, ok := range map[time.Duration]bool{
		40 * time.Second: true, 4 * time.Minute: true, time.Second: true,
		0: false, -time.Minute: false, 500 * time.Millisecond: false, 90500 * time.Millisecond: false,
	} {
		if err := checkNodeLease(d); (err == nil) != ok {
			t.Errorf("checkNodeLease(%s) = %v, want ok %v", d, err, ok)
		}
	}
}

func TestCheckReaders(t *testing.T) {
	for _, tc := range []struct {
		readers int
		split   bool
		ok      bool
	}{{1, false, true}, {1, true, true}, {3, true, true}, {3, false, false}, {0, true, false}, {-1, false, false}} {
		if err := checkReaders(tc.readers, tc.split); (err == nil) != tc.ok {
			t.Errorf("checkReaders(%d, %v) = %v, want ok %v", tc.readers, tc.split, err, tc.ok)
		}
	}
}

func TestMedianInterval(t *testing.T) {
	seq := func(n int) []float64 {
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = float64(n - i) // reversed: the function must sort
		}
		return xs
	}
	tests := []struct {
		n              int
		lo, hi         float64
		coverage       float64 // to 3 decimals
		wantMedianOfXs float64
	}{
		// n=5: no k reaches 95%; the whole range covers 1-2/32.
		{n: 5, lo: 1, hi: 5, coverage: 0.938, wantMedianOfXs: 3},
		// n=8: [x1, x8] covers 1-2/256 = 0.992; [x2, x7] only 0.930.
		{n: 8, lo: 1, hi: 8, coverage: 0.992, wantMedianOfXs: 4.5},
		// n=9: [x2, x8] covers 1-2*10/512 = 0.961.
		{n: 9, lo: 2, hi: 8, coverage: 0.961, wantMedianOfXs: 5},
		// n=24: [x7, x18] covers 0.977 (the textbook table's k for 95%).
		{n: 24, lo: 7, hi: 18, coverage: 0.977, wantMedianOfXs: 12.5},
	}
	for _, tc := range tests {
		got := medianInterval(seq(tc.n), 0.95)
		if got.Lo != tc.lo || got.Hi != tc.hi || math.Round(got.Coverage*1000)/1000 != tc.coverage || got.Median != tc.wantMedianOfXs {
			t.Errorf("n=%d: medianInterval = %+v, want [%v, %v] covering %.3f, median %v", tc.n, got, tc.lo, tc.hi, tc.coverage, tc.wantMedianOfXs)
		}
	}
	if got := medianInterval(nil, 0.95); !math.IsNaN(got.Median) || got.Coverage != 0 {
		t.Errorf("medianInterval(nil) = %+v, want NaN and no coverage", got)
	}
}

func TestCheckFloor(t *testing.T) {
	for _, c := range []struct {
		floor, mode, pprof string
		https, ok          bool
	}{
		{"", "native", "", true, true},
		{"bind", "extender", "", false, true},
		{"filter", "extender", "", false, true},
		{"both", "extender", "", false, false},
		{"bind", "native", "", false, false},
		{"bind", "extender", "/tmp/p", false, false},
		{"filter", "extender", "", true, false},
	} {
		if err := checkFloor(c.floor, c.mode, c.pprof, c.https); (err == nil) != c.ok {
			t.Errorf("checkFloor(%q, %q, %q, %v) = %v, want ok %v", c.floor, c.mode, c.pprof, c.https, err, c.ok)
		}
	}
}

// The filter-only floor drops bindVerb and nothing else from the deployed
// extender, and keeps the client limits.
func TestSchedulerConfigNoBind(t *testing.T) {
	read := func(noBind bool) map[string]any {
		file, flags, err := schedulerConfig(2000, "extender", noBind)
		if err != nil {
			t.Fatal(err)
		}
		defer os.Remove(file)
		if len(flags) != 2 {
			t.Errorf("extender flags %v, want the two client limits", flags)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m["extenders"].([]any)[0].(map[string]any)
	}
	with, without := read(false), read(true)
	if with["bindVerb"] != "bind" {
		t.Fatalf("deployed extender has bindVerb %v, want bind", with["bindVerb"])
	}
	if _, ok := without["bindVerb"]; ok {
		t.Fatalf("noBind kept bindVerb: %v", without)
	}
	delete(with, "bindVerb")
	if !reflect.DeepEqual(with, without) {
		t.Errorf("noBind changed more than bindVerb:\n%v\n%v", with, without)
	}
}

// Every throughput mode the flag accepts alternates two named sides; the
// plugin-tax mode's differ in their binary (a mode missing from the switch
// once ran with no sides at all).
func TestThroughputSides(t *testing.T) {
	for _, mode := range throughputModes {
		sides := throughputSides(mode, "plane.yaml", "/bin", 2000)
		if sides[0].Name == "" || sides[1].Name == "" || sides[0].Name == sides[1].Name {
			t.Errorf("%s: sides %q and %q, want two distinct names", mode, sides[0].Name, sides[1].Name)
		}
		if tax(mode) != (sides[0].Config != "") {
			t.Errorf("%s: tax %v but first side's config %q", mode, tax(mode), sides[0].Config)
		}
	}
	s := throughputSides("plugin-tax", "plane.yaml", "/bin", 2000)
	if s[0].Binary != "/bin/capscale-scheduler" || s[1].Binary != "/bin/kube-scheduler" {
		t.Errorf("plugin-tax binaries %q, %q", s[0].Binary, s[1].Binary)
	}
	if !strings.Contains(s[1].Config, "qps: 2000") {
		t.Errorf("the default side does not get the same client QPS:\n%s", s[1].Config)
	}
}

// TestFits: the warm-up and every round must find room, and two sides that
// request one resource share its capacity (plugin-floor at 500 nodes once
// waited ten minutes for a batch that could never bind).
func TestFits(t *testing.T) {
	for _, tc := range []struct {
		mode                 string
		rounds, batch, nodes int
		ok                   bool
	}{
		{"plugin", 8, 500, 500, true},        // 4500 of each resource
		{"plugin", 9, 500, 500, true},        // 5000 of each
		{"plugin", 10, 500, 500, false},      // 5500 of each
		{"plugin-null", 8, 500, 500, true},   // one resource a side
		{"plugin-floor", 8, 500, 500, false}, // 9000 of one resource
		{"plugin-floor", 8, 250, 500, true},  // 4500 of it
		{"plugin-floor", 8, 500, 5000, true},
		{"dra", 8, 500, 500, true},   // devices a side, the plain resource the other
		{"dra", 10, 500, 500, false}, // 5500 of each
		{"tax", 100, 500, 500, true}, // requests nothing extended
	} {
		err := fits(throughputSides(tc.mode, "", "/bin", 0), tc.rounds, tc.batch, tc.nodes)
		if (err == nil) != tc.ok {
			t.Errorf("%s, %d rounds of %d on %d nodes: %v, want ok %v", tc.mode, tc.rounds, tc.batch, tc.nodes, err, tc.ok)
		}
	}
}

// TestWhyUnbound: a batch that does not bind is reported with the
// scheduler's reason on a pod that waits, not with a bare count.
func TestWhyUnbound(t *testing.T) {
	pod := func(name, node string, conds ...corev1.PodCondition) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "bench", Labels: map[string]string{"batch": "native-5"}},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Conditions: conds}}
	}
	full := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
		Message: "0/500 nodes are available: 500 Insufficient capscale.io/underlay-ip-native."}
	for _, tc := range []struct {
		pods []*corev1.Pod
		want string
	}{
		{[]*corev1.Pod{pod("a", "node-1"), pod("b", "", full)}, "pod b: Unschedulable: 0/500 nodes are available: 500 Insufficient"},
		{[]*corev1.Pod{pod("b", "")}, "pod b has no PodScheduled condition"},
		{nil, "no pod of the batch was listed"},
	} {
		cs := fake.NewClientset()
		for _, p := range tc.pods {
			if _, err := cs.CoreV1().Pods("bench").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if got := whyUnbound(context.Background(), &plane.Plane{Client: cs}, "bench", "native-5"); !strings.Contains(got, tc.want) {
			t.Errorf("got %q, want it to contain %q", got, tc.want)
		}
	}
}

func TestRuntimePerPod(t *testing.T) {
	scrape := func(allocs, gcCPU, cycles string) metricFamilies {
		t.Helper()
		m, err := parseMetrics([]byte("# TYPE go_gc_heap_allocs_bytes_total counter\ngo_gc_heap_allocs_bytes_total " + allocs +
			"\n# TYPE go_cpu_classes_gc_total_cpu_seconds_total counter\ngo_cpu_classes_gc_total_cpu_seconds_total " + gcCPU +
			"\n# TYPE go_gc_cycles_total_gc_cycles_total counter\ngo_gc_cycles_total_gc_cycles_total " + cycles + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	got := runtimePerPod(scrape("1048576", "1.5", "10"), scrape("525336576", "6.5", "60"), 500)
	want := map[string]float64{"alloc MB": 1, "GC CPU ms": 10, "GC cycles": 0.1}
	for k, w := range want {
		if g, ok := got[k]; !ok || g < w*0.999 || g > w*1.001 {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, w)
		}
	}
	// A restarted scheduler (counters went down) and a missing counter give
	// no figure rather than a wrong one.
	if got := runtimePerPod(scrape("9", "9", "9"), scrape("1", "1", "1"), 500); len(got) != 0 {
		t.Errorf("counters that went down: %v, want none", got)
	}
	if got := runtimePerPod(metricFamilies{}, metricFamilies{}, 500); len(got) != 0 {
		t.Errorf("no counters: %v, want none", got)
	}
}

// plugin-floor's configuration: deploy/plugin's profiles and a copy of the
// capscale-scheduler profile that also enables the null plugin.
func TestNullProfile(t *testing.T) {
	cfg, _ := benchSchedulerConfig(t, "plugin-floor")
	enabled := map[string][]string{}
	for _, p := range cfg.Profiles {
		if p.SchedulerName == nil || p.Plugins == nil {
			continue
		}
		for _, e := range p.Plugins.MultiPoint.Enabled {
			enabled[*p.SchedulerName] = append(enabled[*p.SchedulerName], e.Name)
		}
	}
	if got := strings.Join(enabled[exactProfile], ","); got != "UnderlayIP" {
		t.Errorf("%s enables %q, want UnderlayIP alone", exactProfile, got)
	}
	if got := strings.Join(enabled[nullProfile], ","); got != "UnderlayIP,NullPlugin" {
		t.Errorf("%s enables %q, want UnderlayIP,NullPlugin", nullProfile, got)
	}
}

// plugin-memo's configuration: a copy of the capscale-scheduler profile in
// which UnderlayIPDirect, enabled and configured, takes UnderlayIP's place.
func TestDirectProfile(t *testing.T) {
	cfg, b := benchSchedulerConfig(t, "plugin-memo")
	for _, p := range cfg.Profiles {
		if p.SchedulerName == nil || *p.SchedulerName != directProfile {
			continue
		}
		var enabled, configured []string
		for _, e := range p.Plugins.MultiPoint.Enabled {
			enabled = append(enabled, fmt.Sprintf("%s/%d", e.Name, *e.Weight))
		}
		for _, c := range p.PluginConfig {
			configured = append(configured, c.Name)
		}
		if got := strings.Join(enabled, ","); got != "UnderlayIPDirect/100" {
			t.Errorf("%s enables %q, want UnderlayIPDirect/100", directProfile, got)
		}
		if got := strings.Join(configured, ","); got != "UnderlayIPDirect,NodeResourcesFit" {
			t.Errorf("%s configures %q, want UnderlayIPDirect,NodeResourcesFit", directProfile, got)
		}
		return
	}
	t.Fatalf("no profile %s in %s", directProfile, b)
}

// benchSchedulerConfig is mode's scheduler configuration as the rig writes
// it, read with kube-scheduler's own types, and its text.
func benchSchedulerConfig(t *testing.T, mode string) (configv1.KubeSchedulerConfiguration, []byte) {
	t.Helper()
	file, _, err := schedulerConfig(2000, mode, false)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(file)
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var cfg configv1.KubeSchedulerConfiguration
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg, b
}
