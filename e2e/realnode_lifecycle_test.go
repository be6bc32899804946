//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
)

// TestRealNodeLifecycle runs the workload API's lifecycle verbs and an
// ElasticWeb on real containers (the kwok node is tainted: every pod here
// runs on the two real nodes).
//   - restart replaces the containers: new container IDs, and each old
//     container got SIGTERM and its grace period (the image records both,
//     and keeps serving 2s after SIGTERM before it exits);
//   - stop leaves no container running on either node (containerd says);
//   - start brings them back, each with an IP of its node's range,
//     answering HTTP there;
//   - an ElasticWeb's pods answer HTTP on their pod IPs.
func TestRealNodeLifecycle(t *testing.T) {
	records := t.TempDir() // removed after the nodes: their pods write here
	s, _ := startAdapterStack(t, 0.5, func(o *stack.Options) {
		o.Plane.Nodes, o.Plane.RealNodes = 1, 2
		o.Plane.Node = func(_ int, n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "e2e.capscale.io/kwok", Effect: corev1.TaintEffectNoSchedule})
		}
		o.WorkloadAPI, o.Controller = true, true
	})
	t.Cleanup(func() {
		if err := s.StopRealNodes(); err != nil {
			t.Errorf("real nodes' cleanup: %v", err)
		}
	})
	ctx := testContext(t, 6*time.Minute)
	const ns = adapterNS
	console := workloadConsole(ctx, t, s, ns)
	base := "/v1/namespaces/" + ns + "/deployments/web"
	if _, err := s.Client.AppsV1().Deployments(ns).Create(ctx, recordingDeployment(ns, "web", 3, records), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	old := waitServing(ctx, t, s, ns, "app=web", 3)

	t.Run("restart replaces the containers, each stopped gracefully", func(t *testing.T) {
		if code := retry202(ctx, t, func() int { return console.do(ctx, "POST", base+"/restart", nil, nil) }); code != 202 {
			t.Fatalf("restart: %d", code)
		}
		fresh := waitReplaced(ctx, t, s, ns, "app=web", old, 3)
		for name, c := range fresh {
			for _, o := range old {
				if c.containerID == o.containerID {
					t.Errorf("pod %s runs container %s of the old pods", name, c.containerID)
				}
			}
		}
		for name, o := range old {
			term, exit := terminationOf(t, records, name)
			if term.IsZero() || exit.IsZero() {
				t.Errorf("old pod %s (container %s): SIGTERM at %v, exit at %v; want both recorded", name, o.containerID, term, exit)
				continue
			}
			// The image serves 2s after SIGTERM: an exit recorded after
			// that means the kubelet waited instead of killing it.
			if d := exit.Sub(term); d < 2*time.Second {
				t.Errorf("old pod %s exited %v after SIGTERM, want its 2s: killed before its grace period ended", name, d)
			}
			if running := runningTasks(ctx, t, s, o.node, ns); running[strings.TrimPrefix(o.containerID, "containerd://")] {
				t.Errorf("old container %s of %s still runs on %s", o.containerID, name, o.node)
			}
		}
		old = fresh
	})

	t.Run("stop leaves no container, start brings them back with IPs", func(t *testing.T) {
		if code := console.do(ctx, "POST", base+"/stop", nil, nil); code != 200 {
			t.Fatalf("stop: %d", code)
		}
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			pods, err := s.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
			if err != nil || len(pods.Items) > 0 {
				return false, nil
			}
			for _, n := range s.RealNodes {
				if len(runningTasks(ctx, t, s, n.Name, ns)) > 0 {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			for _, n := range s.RealNodes {
				t.Logf("%s runs %v", n.Name, runningTasks(ctx, t, s, n.Name, ns))
			}
			t.Fatalf("after stop, pods or containers remain: %v", err)
		}
		for _, n := range s.RealNodes {
			if ips, err := n.AllocatedIPs(); err != nil || len(ips) != 0 {
				t.Errorf("%s: the IPAM still holds %v after stop (%v)", n.Name, ips, err)
			}
		}
		if code := console.do(ctx, "POST", base+"/start", nil, nil); code != 200 {
			t.Fatalf("start: %d", code)
		}
		waitServing(ctx, t, s, ns, "app=web", 3)
	})

	t.Run("an ElasticWeb's pods answer on their IPs", func(t *testing.T) {
		dyn, err := dynamic.NewForConfig(s.Config)
		if err != nil {
			t.Fatal(err)
		}
		c := &ewClient{t: t, s: s, dyn: dyn}
		manifest := fmt.Sprintf(`apiVersion: capscale.io/v1alpha1
kind: ElasticWeb
metadata: {name: shop}
spec: {image: %q, port: 8080, singlePodQPS: 500, totalQPS: 800}
`, plane.RealNodeImage)
		if out, err := c.apply(ctx, manifest); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		c.waitStatus(ctx, "shop", 2*time.Minute, "2 ready, realQPS 1000", serving(2, 1000))
		waitServing(ctx, t, s, ns, "capscale.io/elasticweb=shop", 2)
	})
}

// workloadConsole is a workload API client with edit rights in ns.
func workloadConsole(ctx context.Context, t *testing.T, s *stack.Stack, ns string) *apiClient {
	t.Helper()
	hc, err := s.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := s.ServiceAccountToken(ctx, ns, "console")
	if err != nil {
		t.Fatal(err)
	}
	bind(ctx, t, s, ns, "console-edit", "ClusterRole", "edit", "console")
	return &apiClient{t: t, s: s, http: hc, token: tok}
}

// retry202 calls f until it answers 202 (the apiserver's RBAC cache sees a
// new RoleBinding a moment late) or 30s pass, and returns the last code.
func retry202(ctx context.Context, t *testing.T, f func() int) int {
	t.Helper()
	code := f()
	for end := time.Now().Add(30 * time.Second); code == 403 && time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		code = f()
	}
	return code
}

// recordingDeployment runs RealNodeImage on the real nodes: it records
// start, SIGTERM and exit in records (a hostPath) and serves 2s after
// SIGTERM, within a 30s grace period.
func recordingDeployment(ns, name string, replicas int32, records string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	pod := plane.RealNodePod(ns, "")
	pod.Spec.TerminationGracePeriodSeconds = ptr.To(int64(30))
	c := &pod.Spec.Containers[0]
	c.Env = []corev1.EnvVar{{Name: "RECORD_DIR", Value: "/records"}, {Name: "TERM_DELAY", Value: "2s"}}
	c.VolumeMounts = []corev1.VolumeMount{{Name: "records", MountPath: "/records"}}
	pod.Spec.Volumes = []corev1.Volume{{Name: "records", VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: records, Type: ptr.To(corev1.HostPathDirectory)},
	}}}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod.Spec},
		},
	}
}

// realContainer is a Running pod's container as the pod status says.
type realContainer struct {
	node, containerID string
	ip                netip.Addr
}

// waitServing waits until exactly want pods match selector, all Running on
// real nodes with an IP of their node's range, each answering HTTP on it
// with its own name; it returns them by name.
func waitServing(ctx context.Context, t *testing.T, s *stack.Stack, ns, selector string, want int) map[string]realContainer {
	t.Helper()
	var last string
	var out map[string]realContainer
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		out, last = runningOnRealNodes(ctx, s, ns, selector)
		return out != nil && len(out) == want, nil
	})
	if err != nil {
		t.Fatalf("%d pods %s never all Running on real nodes: %s", want, selector, last)
	}
	checkAnswers(ctx, t, s, out)
	return out
}

// waitReplaced waits until want pods match selector, none of them in old,
// all Running and serving, and the old pods gone.
func waitReplaced(ctx context.Context, t *testing.T, s *stack.Stack, ns, selector string, old map[string]realContainer, want int) map[string]realContainer {
	t.Helper()
	var last string
	var out map[string]realContainer
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := s.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, nil
		}
		for _, p := range pods.Items {
			if _, ok := old[p.Name]; ok {
				last = "old pod " + p.Name + " still there"
				return false, nil
			}
		}
		out, last = runningOnRealNodes(ctx, s, ns, selector)
		return out != nil && len(out) == want, nil
	})
	if err != nil {
		t.Fatalf("the pods %s were never all replaced: %s", selector, last)
	}
	checkAnswers(ctx, t, s, out)
	return out
}

// runningOnRealNodes returns the pods of selector if all are Running on
// real nodes with an IP of their range; else nil and why not.
func runningOnRealNodes(ctx context.Context, s *stack.Stack, ns, selector string) (map[string]realContainer, string) {
	pods, err := s.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err.Error()
	}
	out := map[string]realContainer{}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil || len(p.Status.ContainerStatuses) != 1 || !p.Status.ContainerStatuses[0].Ready {
			return nil, fmt.Sprintf("pod %s: %s on %q, not ready", p.Name, p.Status.Phase, p.Spec.NodeName)
		}
		ip, err := netip.ParseAddr(p.Status.PodIP)
		if err != nil {
			return nil, fmt.Sprintf("pod %s: IP %q", p.Name, p.Status.PodIP)
		}
		var node *plane.RealNode
		for _, n := range s.RealNodes {
			if n.Name == p.Spec.NodeName {
				node = n
			}
		}
		if node == nil || !node.InRange(ip) {
			return nil, fmt.Sprintf("pod %s: IP %s on %q, not a real node's range", p.Name, ip, p.Spec.NodeName)
		}
		out[p.Name] = realContainer{node: node.Name, containerID: p.Status.ContainerStatuses[0].ContainerID, ip: ip}
	}
	return out, fmt.Sprintf("%d pods", len(out))
}

// checkAnswers GETs every pod's IP from the host, through its node's
// bridge: each must answer with its own name.
func checkAnswers(ctx context.Context, t *testing.T, s *stack.Stack, pods map[string]realContainer) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	names := make([]string, 0, len(pods))
	for n := range pods {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		url := fmt.Sprintf("http://%s/", netip.AddrPortFrom(pods[name].ip, 8080))
		// A container is Running once started, a moment before it
		// listens: a refused connection is retried for a few seconds.
		var body []byte
		var code int
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return false, err
			}
			resp, err := client.Do(req)
			if err != nil {
				body = []byte(err.Error())
				return false, nil
			}
			defer resp.Body.Close()
			code = resp.StatusCode
			body, _ = io.ReadAll(resp.Body)
			return true, nil
		})
		if err != nil || !strings.HasPrefix(string(body), "pod="+name+" ") {
			t.Errorf("pod %s on %s: GET %s answered %d %q, want its name", name, pods[name].node, url, code, body)
		}
	}
	t.Logf("%d pods answered HTTP on their IPs: %v", len(names), names)
}

// terminationOf reads what pod's container recorded: when it got SIGTERM
// and when it exited (zero when not recorded).
func terminationOf(t *testing.T, records, pod string) (term, exit time.Time) {
	t.Helper()
	f, err := os.Open(filepath.Join(records, pod))
	if err != nil {
		t.Errorf("no record of pod %s: %v", pod, err)
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		event, at, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		ts, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			continue
		}
		switch event {
		case "sigterm":
			term = ts
		case "exit":
			exit = ts
		}
	}
	return term, exit
}

// runningTasks lists the containers of ns that run on the real node, as
// its containerd says (ctr: the kubelet's API is not reachable here).
func runningTasks(ctx context.Context, t *testing.T, s *stack.Stack, node, ns string) map[string]bool {
	t.Helper()
	n := realNode(t, s, node)
	ids, err := n.Ctr(ctx, "containers", "ls", "-q", `labels."io.kubernetes.pod.namespace"==`+ns)
	if err != nil {
		t.Fatal(err)
	}
	ofNS := map[string]bool{}
	for _, id := range strings.Fields(ids) {
		ofNS[id] = true
	}
	tasks, err := n.Ctr(ctx, "tasks", "ls")
	if err != nil {
		t.Fatal(err)
	}
	running := map[string]bool{}
	for _, l := range strings.Split(tasks, "\n") {
		// TASK PID STATUS
		f := strings.Fields(l)
		if len(f) == 3 && f[2] == "RUNNING" && ofNS[f[0]] {
			running[f[0]] = true
		}
	}
	return running
}
