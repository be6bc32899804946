//go:build e2e

package e2e

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/extender"
	"github.com/capscale/capscale/internal/ipreport"
	"github.com/capscale/capscale/internal/names"
)

// kubectlCapacity is the mixed cluster of the kubectl tests: capacities 0
// and 3, one invalid annotation, one from the label, the rest the default
// 10: 36 IPs over 7 nodes.
func kubectlCapacity(i int, n *corev1.Node) {
	switch i {
	case 0:
		n.Annotations[names.UnderlayIPCapacityAnnotation] = "0"
	case 1:
		n.Annotations[names.UnderlayIPCapacityAnnotation] = "3"
	case 2:
		n.Annotations[names.UnderlayIPCapacityAnnotation] = "lots"
	case 3:
		n.Labels[names.UnderlayIPCapacityLabel] = "3"
	}
}

// kubectlCapacities is what kubectlCapacity gives nodes 0 to 6, and
// whether the value is invalid.
var kubectlCapacities = []struct {
	ips     int64
	invalid bool
}{{0, false}, {3, false}, {0, true}, {3, false}, {10, false}, {10, false}, {10, false}}

// TestKubectlIPs: in every scheduling mode, on the mixed cluster with pods
// bound and Pending, `kubectl capscale ips` (installed from the release's
// krew manifest, run by the real kubectl as a user bound to
// capscale-kubectl:ips) equals, node by node and in every output format,
// the extender's /capacity (extender and native mode) or, in plugin mode,
// where no capscale process runs, the capacities the nodes were given and
// the pods the apiserver shows bound.
func TestKubectlIPs(t *testing.T) {
	pluginDir := installPlugin(t)
	for _, mode := range []string{"extender", "native", "plugin"} {
		t.Run(mode, func(t *testing.T) {
			s := startStack(t, stack.Options{
				Plane:    plane.Options{Nodes: 7, Logf: t.Logf, Node: kubectlCapacity},
				Extender: mode != "plugin", Native: mode == "native", Plugin: mode == "plugin",
				// check reads an external metric: plugin mode, where
				// capscale-scheduler places its probe pod, runs the adapter.
				Adapter: mode == "plugin",
			})
			ctx := testContext(t, 8*time.Minute)
			const ns = "kubectl-ips"
			kc := kubectlUser(ctx, t, s, ns, "ops", "ClusterRole", "capscale-kubectl:ips", true)
			run := pluginRunner(t, s, pluginDir, kc)

			// 30 one-IP pods and 4 two-IP pods over 36 IPs: some bound,
			// some Pending for want of IPs.
			for name, n := range map[string]int32{"ones": 30, "twos": 4} {
				need := int64(1)
				if name == "twos" {
					need = 2
				}
				if _, err := s.Client.AppsV1().Deployments(ns).Create(ctx, SimpleDeployment(ns, name, n, underlayRequest(need)), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			waitSettled(ctx, t, s, ns, 34)

			var last string
			err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				want, err := truthOf(ctx, s, mode)
				if err != nil {
					last = err.Error()
					return false, nil
				}
				last = ""
				for _, format := range []string{"json", "yaml", "table", "wide"} {
					got := fromPlugin(t, run(ctx, "ips", format), format)
					if d := diffNodes(got, want); d != "" {
						last += fmt.Sprintf("%s: %s\n", format, d)
					}
				}
				return last == "", nil
			})
			if err != nil {
				t.Fatalf("kubectl capscale ips never equalled the %s: %v\n%s", map[bool]string{true: "capacities given and the pods bound", false: "extender's /capacity"}[mode == "plugin"], err, last)
			}

			var rep ipreport.Report
			if err := json.Unmarshal([]byte(run(ctx, "ips", "json")), &rep); err != nil {
				t.Fatal(err)
			}
			pending := pendingCount(ctx, t, s, ns)
			if pending == 0 || rep.Totals.Waiting != pending || rep.Totals.Invalid != 1 || rep.Totals.Nodes != 7 {
				t.Errorf("totals %+v with %d pods Pending: want them all waiting, one invalid node of 7", rep.Totals, pending)
			}
			for _, n := range rep.Nodes {
				published := n.Published != nil && *n.Published == n.Capacity
				if (mode == "native") != published {
					t.Errorf("%s: %s published %v, capacity %d", mode, n.Name, n.Published, n.Capacity)
				}
			}
			selectedIPs(ctx, t, run, rep)
			t.Logf("kubectl capscale ips (%s mode):\n%s", mode, run(ctx, "ips", "table"))
			if mode == "plugin" {
				t.Run("check and ips as the operator Roles", func(t *testing.T) { operatorRoles(ctx, t, s, pluginDir) })
			}
		})
	}
}

// selectedIPs: `ips -l` shows the selected nodes as the whole report shows
// them, and only the pods on those nodes count: none of the pods bound to
// the other nodes turns up as a no-node row or in the totals.
func selectedIPs(ctx context.Context, t *testing.T, run func(ctx context.Context, verb, format string, args ...string) string, all ipreport.Report) {
	t.Helper()
	picked := []string{plane.NodeName(1), plane.NodeName(4)}
	var rep ipreport.Report
	if err := json.Unmarshal([]byte(run(ctx, "ips", "json", "-l", "kubernetes.io/hostname in ("+strings.Join(picked, ",")+")")), &rep); err != nil {
		t.Fatal(err)
	}
	want := ipreport.Totals{Nodes: len(picked), Waiting: all.Totals.Waiting}
	var got []string
	for _, n := range rep.Nodes {
		got = append(got, n.Name+"/"+n.Source)
	}
	for _, name := range picked {
		for _, n := range all.Nodes {
			if n.Name == name {
				want.Capacity, want.Used, want.Free = want.Capacity+n.Capacity, want.Used+n.Used, want.Free+n.Free
				if n.Free == 0 {
					want.Full++
				}
			}
		}
	}
	if len(rep.Nodes) != len(picked) || rep.Nodes[0].Name != picked[0] || rep.Nodes[1].Name != picked[1] {
		t.Errorf("ips -l %v shows %v", picked, got)
	}
	if rep.Totals != want {
		t.Errorf("ips -l %v: totals %+v, want %+v", picked, rep.Totals, want)
	}
}

// installPlugin builds a release for this platform with hack/release and
// installs kubectl-capscale from it as krew would: the manifest's platform
// entry, the archive's sha256 checked, its files copied. It returns the
// directory to put on PATH.
func installPlugin(t *testing.T) string {
	t.Helper()
	out := t.TempDir()
	platform := runtime.GOOS + "/" + runtime.GOARCH
	cmd := exec.Command("go", "run", "./hack/release", "--version", "v0.0.0-e2e", "--platforms", platform, "--out", out)
	cmd.Dir = plane.RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make release for %s: %v\n%s", platform, err, b)
	}
	raw, err := os.ReadFile(filepath.Join(out, "capscale.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Spec struct {
			Platforms []struct {
				Selector struct{ MatchLabels map[string]string } `json:"selector"`
				URI      string                                  `json:"uri"`
				SHA256   string                                  `json:"sha256"`
				Bin      string                                  `json:"bin"`
				Files    []struct{ From, To string }             `json:"files"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	// The fields krew installs from; TestManifest checks the whole format.
	if err := yaml.Unmarshal(raw, &m); err != nil {
		t.Fatalf("krew manifest: %v", err)
	}
	dir := t.TempDir()
	for _, p := range m.Spec.Platforms {
		if p.Selector.MatchLabels["os"] != runtime.GOOS || p.Selector.MatchLabels["arch"] != runtime.GOARCH {
			continue
		}
		archive := filepath.Join(out, filepath.Base(p.URI))
		data, err := os.ReadFile(archive)
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != p.SHA256 {
			t.Fatalf("%s: sha256 differs from the manifest's", archive)
		}
		gz, err := gzip.NewReader(strings.NewReader(string(data)))
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(gz)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Files) != 1 || h.Name != p.Files[0].From {
				continue
			}
			f, err := os.OpenFile(filepath.Join(dir, p.Bin), os.O_CREATE|os.O_WRONLY, 0o755)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
		if _, err := os.Stat(filepath.Join(dir, p.Bin)); err != nil {
			t.Fatalf("the archive did not hold %s: %v", p.Bin, err)
		}
		return dir
	}
	t.Fatalf("the krew manifest has no entry for %s:\n%s", platform, raw)
	return ""
}

// kubectlUser creates ServiceAccount ns/name bound to role (cluster-wide
// when clusterWide) and returns a kubeconfig that authenticates as it.
func kubectlUser(ctx context.Context, t *testing.T, s *stack.Stack, ns, name, kind, role string, clusterWide bool) string {
	t.Helper()
	if err := s.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"kubectl/roles.yaml", "workload-api/roles.yaml"} {
		if _, err := s.Kubectl(ctx, "apply", "-f", stack.DeployFile(f)); err != nil {
			t.Fatal(err)
		}
	}
	kc, err := s.ServiceAccountKubeconfig(ctx, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	if clusterWide {
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: kind, Name: role},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}},
		}
		if _, err := s.Client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	} else {
		bind(ctx, t, s, ns, ns+"-"+name+"-"+strings.ReplaceAll(role, ":", "-"), kind, role, name)
	}
	return kc
}

// pluginRunner runs `kubectl capscale ARGS` with the real kubectl, which
// finds the plugin on PATH, as the user of kubeconfig. A format of "table"
// means no -o.
func pluginRunner(t *testing.T, s *stack.Stack, pluginDir, kubeconfig string) func(ctx context.Context, verb, format string, args ...string) string {
	return func(ctx context.Context, verb, format string, args ...string) string {
		t.Helper()
		out, err := runPlugin(ctx, s, pluginDir, kubeconfig, verb, format, args...)
		if err != nil {
			t.Fatalf("kubectl capscale %s %v: %v\n%s", verb, args, err, out)
		}
		return out
	}
}

func runPlugin(ctx context.Context, s *stack.Stack, pluginDir, kubeconfig, verb, format string, args ...string) (string, error) {
	// kubectl takes no flag before a plugin's name: the kubeconfig goes in
	// the environment, as a user's would.
	argv := append([]string{"capscale", verb}, args...)
	if format != "table" {
		argv = append(argv, "-o", format)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(s.Plane.Opts.BinDir, "kubectl"), argv...)
	cmd.Env = append(os.Environ(), "PATH="+pluginDir+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+kubeconfig)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

// nodeView is what both sides say of a node.
type nodeView struct {
	capacity, used, free int64
	invalid              bool
	// holders is "ns/name=IPs,..." sorted; "" when not shown.
	holders string
}

// truthOf is what kubectl capscale ips must show: the extender's ledger,
// or in plugin mode the capacities kubectlCapacity gave and the pods bound.
func truthOf(ctx context.Context, s *stack.Stack, mode string) (map[string]nodeView, error) {
	if mode != "plugin" {
		rep, err := capacityReport(ctx, s.ExtenderURL)
		if err != nil {
			return nil, err
		}
		return fromLedger(rep), nil
	}
	pods, err := s.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	used, holders := map[string]int64{}, map[string][]string{}
	for _, p := range pods.Items {
		var ips int64
		for _, c := range p.Spec.Containers {
			q := c.Resources.Limits[names.UnderlayIPResource]
			ips += q.Value()
		}
		if p.Spec.NodeName == "" || ips == 0 || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		used[p.Spec.NodeName] += ips
		holders[p.Spec.NodeName] = append(holders[p.Spec.NodeName], fmt.Sprintf("%s/%s=%d", p.Namespace, p.Name, ips))
	}
	out := map[string]nodeView{}
	for i, c := range kubectlCapacities {
		name := plane.NodeName(i)
		sort.Strings(holders[name])
		out[name] = nodeView{c.ips, used[name], max(c.ips-used[name], 0), c.invalid, strings.Join(holders[name], ",")}
	}
	return out, nil
}

func fromLedger(rep extender.Report) map[string]nodeView {
	out := map[string]nodeView{}
	for _, n := range rep.Nodes {
		var h []string
		for _, p := range n.Pods {
			if p.State == "bound" {
				h = append(h, fmt.Sprintf("%s/%s=%d", p.Namespace, p.Name, p.IPs))
			}
		}
		sort.Strings(h)
		out[n.Name] = nodeView{n.Capacity, n.Used, n.Free, n.CapacityError != "", strings.Join(h, ",")}
	}
	return out
}

// fromPlugin parses the plugin's output in format.
func fromPlugin(t *testing.T, out, format string) map[string]nodeView {
	t.Helper()
	res := map[string]nodeView{}
	switch format {
	case "json", "yaml":
		var rep ipreport.Report
		var err error
		if format == "json" {
			err = json.Unmarshal([]byte(out), &rep)
		} else {
			err = yaml.UnmarshalStrict([]byte(out), &rep)
		}
		if err != nil {
			t.Fatalf("%s output: %v\n%s", format, err, out)
		}
		for _, n := range rep.Nodes {
			h := make([]string, len(n.Holders))
			for i, p := range n.Holders {
				h[i] = fmt.Sprintf("%s/%s=%d", p.Namespace, p.Name, p.IPs)
			}
			sort.Strings(h)
			res[n.Name] = nodeView{n.Capacity, n.Used, n.Free, n.Invalid != "", strings.Join(h, ",")}
		}
		return res
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	header := strings.Fields(lines[0])
	col := map[string]int{}
	for i, h := range header {
		col[h] = i
	}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if f[0] == "TOTAL" {
			continue
		}
		num := func(h string) int64 {
			v, err := strconv.ParseInt(f[col[h]], 10, 64)
			if err != nil {
				t.Fatalf("%s column %s of %q: %v", format, h, l, err)
			}
			return v
		}
		v := nodeView{capacity: num("CAPACITY"), used: num("USED"), free: num("FREE"), invalid: f[col["SOURCE"]] == "invalid"}
		if format == "wide" {
			// HOLDERS is the last column; "<none>" when empty.
			if h := f[len(f)-1]; h != "<none>" {
				parts := strings.Split(h, ",")
				sort.Strings(parts)
				v.holders = strings.Join(parts, ",")
			}
		}
		res[f[0]] = v
	}
	return res
}

// diffNodes compares node by node; holders only where the plugin shows
// them.
func diffNodes(got, want map[string]nodeView) string {
	var d []string
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			d = append(d, name+" missing")
			continue
		}
		// A table without holders compares the numbers only.
		cmp := w
		if g.holders == "" {
			cmp.holders = ""
		}
		if g != cmp {
			d = append(d, fmt.Sprintf("%s: plugin %+v, ledger %+v", name, g, w))
		}
	}
	if len(got) != len(want) {
		d = append(d, fmt.Sprintf("%d nodes, ledger %d", len(got), len(want)))
	}
	return strings.Join(d, "; ")
}

// waitSettled waits until all want pods of ns exist and the scheduler is
// done: every pod bound or Pending with a FailedScheduling condition, and
// the bound count unchanged over two seconds.
func waitSettled(ctx context.Context, t *testing.T, s *stack.Stack, ns string, want int) {
	t.Helper()
	prev, stable := -1, 0
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := s.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) != want {
			return false, nil
		}
		bound := 0
		for _, p := range pods.Items {
			switch {
			case p.Spec.NodeName != "":
				bound++
			case !unschedulable(p):
				return false, nil
			}
		}
		if bound == prev {
			stable++
		} else {
			prev, stable = bound, 0
		}
		return stable >= 4, nil
	})
	if err != nil {
		t.Fatalf("pods of %s never settled: %v", ns, err)
	}
}

func unschedulable(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

func pendingCount(ctx context.Context, t *testing.T, s *stack.Stack, ns string) int {
	t.Helper()
	pods, err := s.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName="})
	if err != nil {
		t.Fatal(err)
	}
	return len(pods.Items)
}

// TestKubectlLifecycle: the verbs act as the kubectl user. A user with only
// the scale Role scales and cannot stop, told which right is missing, and
// nothing changes; stop then start returns the remembered count; max
// scales to what kube-scheduler then places, every replica bound and no IP
// left.
func TestKubectlLifecycle(t *testing.T) {
	pluginDir := installPlugin(t)
	s := startStack(t, stack.Options{
		Plane:    plane.Options{Nodes: 7, Logf: t.Logf, Node: kubectlCapacity},
		Extender: true,
	})
	ctx := testContext(t, 8*time.Minute)
	const ns = "kubectl-verbs"
	scaler := pluginRunnerRaw(s, pluginDir, kubectlUser(ctx, t, s, ns, "scaler", "ClusterRole", "capscale-workload:scale", false))
	consoleKC := kubectlUser(ctx, t, s, ns, "console", "ClusterRole", "capscale-kubectl:ips", true)
	bind(ctx, t, s, ns, "console-edit", "ClusterRole", "edit", "console")
	console := pluginRunner(t, s, pluginDir, consoleKC)

	if _, err := s.Client.AppsV1().Deployments(ns).Create(ctx, SimpleDeployment(ns, "app", 2, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	replicas := func(name string) (int32, map[string]string) {
		d, err := s.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return *d.Spec.Replicas, d.Annotations
	}

	t.Run("the scale Role scales and cannot stop", func(t *testing.T) {
		if out, err := scaler(ctx, "scale", "table", "deploy/app", "-n", ns, "--replicas", "3"); err != nil || !strings.Contains(out, "scaled from 2 to 3") {
			t.Fatalf("scale as the scaler: %v\n%s", err, out)
		}
		out, err := scaler(ctx, "stop", "table", "deploy/app", "-n", ns)
		t.Logf("kubectl capscale stop as the scaler:\n%s", out)
		if err == nil || !strings.Contains(out, `cannot get resource "deployments" in API group "apps"`) || !strings.Contains(out, "capscale-workload:stop-start") {
			t.Fatalf("stop as the scaler: %v\n%s\nwant the missing right named and the Role that grants it", err, out)
		}
		if n, a := replicas("app"); n != 3 || a[names.ReplicasBeforeStopAnnotation] != "" {
			t.Errorf("after the refused stop: replicas %d, annotations %v; want 3 and nothing remembered", n, a)
		}
	})

	t.Run("stop then start returns the remembered count", func(t *testing.T) {
		if out := console(ctx, "stop", "table", "deployment/app", "-n", ns); !strings.Contains(out, "start will restore 3 replicas") {
			t.Errorf("stop: %s", out)
		}
		if n, a := replicas("app"); n != 0 || a[names.ReplicasBeforeStopAnnotation] != "3" {
			t.Fatalf("after stop: replicas %d, annotations %v", n, a)
		}
		var started struct{ Replicas int32 }
		if err := json.Unmarshal([]byte(console(ctx, "start", "json", "deployments.apps", "app", "-n", ns)), &started); err != nil || started.Replicas != 3 {
			t.Errorf("start: %+v %v", started, err)
		}
		if n, a := replicas("app"); n != 3 || a[names.ReplicasBeforeStopAnnotation] != "" {
			t.Errorf("after start: replicas %d, annotations %v; want 3 and the memory gone", n, a)
		}
	})

	t.Run("max is what kube-scheduler then places", func(t *testing.T) {
		for name, n := range map[string]int32{"fill": 20, "web": 1} {
			if _, err := s.Client.AppsV1().Deployments(ns).Create(ctx, SimpleDeployment(ns, name, n, underlayRequest(1)), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		waitSettled(ctx, t, s, ns, 3+20+1)
		if p := pendingCount(ctx, t, s, ns); p != 0 {
			t.Fatalf("%d pods Pending before max", p)
		}
		dry := console(ctx, "max", "table", "deploy/web", "-n", ns, "--dry-run")
		out := console(ctx, "max", "table", "deploy/web", "-n", ns)
		n, _ := replicas("web")
		t.Logf("max --dry-run: %s\nmax: %s", dry, out)
		// 36 IPs, 21 held: 15 more fit.
		if n != 16 || !strings.Contains(dry, "can run 16 replicas (now 1)") {
			t.Fatalf("max scaled web to %d (dry run: %s), want 1 + the 15 free IPs", n, dry)
		}
		waitSettled(ctx, t, s, ns, 3+20+16)
		if p := pendingCount(ctx, t, s, ns); p != 0 {
			t.Errorf("%d pods Pending after max: it asked for more than kube-scheduler places", p)
		}
		var rep ipreport.Report
		if err := json.Unmarshal([]byte(console(ctx, "ips", "json")), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Totals.Free != 0 || rep.Totals.Used != 36 {
			t.Errorf("after max: %+v; want every IP used, none free: max left room", rep.Totals)
		}
	})
}

// pluginRunnerRaw is pluginRunner that returns the error with the output
// (stdout and stderr) instead of failing.
func pluginRunnerRaw(s *stack.Stack, pluginDir, kubeconfig string) func(ctx context.Context, verb, format string, args ...string) (string, error) {
	return func(ctx context.Context, verb, format string, args ...string) (string, error) {
		return runPlugin(ctx, s, pluginDir, kubeconfig, verb, format, args...)
	}
}
