package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/internal/names"
)

// systemNodeCapacity is the system node's IPAM range: room for capscale's
// own pods, which ask for no underlay IP, so no capscale count meets them.
const systemNodeCapacity = 20

// chartOptions are up's flags for --chart.
type chartOptions struct {
	dir, binDir       string
	realNodes, cap    int
	chartVersion      string
	logf              func(string, ...any)
	registryBinary    string
	initialLoadSource float64
}

// upChart starts a cluster for the Helm chart to be installed into, as an
// operator's would be (docs/getting-started.md): real nodes only, the
// service network, no capscale component. real-node-0 is the system node
// (capacity annotation 0: capscale places no underlay pod there; capscale's
// own pods go there by the chart's nodeSelector); the others hold cap
// underlay IPs each. Beside it: a local OCI registry the nodes pull from
// (make local-up pushes capscale's image and chart there) and a load index
// (a pod on the system node and its Service).
func upChart(ctx context.Context, o chartOptions) error {
	if o.realNodes < 2 {
		return fmt.Errorf("--chart needs at least 2 real nodes (a system node and an underlay node), got --real-nodes %d", o.realNodes)
	}
	if o.chartVersion == "" {
		return fmt.Errorf("--chart needs --chart-version, the version make local-up pushes the chart with")
	}
	if _, err := os.Stat(o.registryBinary); err != nil {
		return fmt.Errorf("--chart: %w", err)
	}
	start := time.Now()
	port, err := plane.FreePort()
	if err != nil {
		return err
	}
	registry := fmt.Sprintf("127.0.0.1:%d", port)
	caps := []int{systemNodeCapacity}
	for range o.realNodes - 1 {
		caps = append(caps, o.cap)
	}
	p, err := plane.Start(ctx, plane.Options{
		Dir: filepath.Join(o.dir, "plane"), BinDir: o.binDir, Nodes: -1, Detach: true, Logf: o.logf,
		RealNodes: o.realNodes, RealNodeCapacities: caps, RealNodeRegistries: []string{registry},
		ServiceNetwork: true,
		// Short enough for getting-started's HPA to act in seconds.
		HPASyncPeriod: 5 * time.Second,
	})
	if err != nil {
		return err
	}
	fail := func(err error) error { p.Stop(); return err }
	system := p.RealNodes[0]
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{names.UnderlayIPCapacityAnnotation: "0"}}})
	if _, err := p.Client.CoreV1().Nodes().Patch(ctx, system.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fail(fmt.Errorf("marking %s the system node: %w", system.Name, err))
	}
	o.logf("starting a local OCI registry on %s", registry)
	if _, err := p.StartProcess("registry", o.registryBinary, "registry", "--addr", registry); err != nil {
		return fail(err)
	}
	if err := waitHTTP(ctx, "http://"+registry+"/v2/"); err != nil {
		return fail(fmt.Errorf("the registry: %w", err))
	}
	o.logf("starting the load index: a pod on %s and its Service", system.Name)
	loadURL, podURL, err := startLoadIndex(ctx, p, system.Name, o.initialLoadSource)
	if err != nil {
		return fail(err)
	}

	st := state{Dir: o.dir, RealNodeFootprint: p.RealNodeFootprint()}
	for _, proc := range p.Processes() {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", proc.Pid()))
		st.Procs = append(st.Procs, procRef{Name: proc.Name, Pid: proc.Pid(), Exe: exe})
	}
	var nodes []string
	for _, n := range p.RealNodes {
		nodes = append(nodes, n.Name)
	}
	env := map[string]string{
		"KUBECONFIG":          filepath.Join(o.dir, "kubeconfig"),
		"MODE":                "chart",
		"REGISTRY":            registry,
		"CHART_VERSION":       o.chartVersion,
		"LOAD_SOURCE_URL":     loadURL,
		"LOAD_SOURCE_POD_URL": podURL,
		"SYSTEM_NODE":         system.Name,
		"REAL_NODES":          strings.Join(nodes, " "),
		"REAL_NODE_IMAGE":     plane.RealNodeImage,
		"REAL_NODE_CAPACITY":  fmt.Sprint(o.cap),
	}
	if err := finishUp(p, o.dir, st, env); err != nil {
		return fail(err)
	}
	// helm, kubectl and kubectl-capscale of this checkout first on PATH.
	f, err := os.OpenFile(filepath.Join(o.dir, "env"), os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = fmt.Fprintf(f, "export PATH=%q:\"$PATH\"\n", o.binDir)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fail(err)
	}
	fmt.Printf("local plane up in %.1fs for the chart: %d real nodes (%s the system node), registry %s; logs in %s\n",
		time.Since(start).Seconds(), o.realNodes, system.Name, registry, filepath.Join(o.dir, "plane", "logs"))
	return nil
}

// startLoadIndex runs the load index as pods see a business endpoint: the
// real nodes' web image (GET /load answers {"load": X}, PUT
// /load?value=X sets it) on the system node, behind the Service
// load-source/load. It returns the Service's URL, which the adapter
// polls, and the pod's, which this host reaches to set the value.
func startLoadIndex(ctx context.Context, p *plane.Plane, node string, initial float64) (svcURL, podURL string, err error) {
	const ns = "load-source"
	if err := p.WaitForNamespace(ctx, ns); err != nil {
		return "", "", err
	}
	pod := plane.RealNodePod(ns, "load")
	pod.Labels = map[string]string{"app": "load"}
	pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "LOAD", Value: fmt.Sprint(initial)}}
	if _, err := p.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return "", "", fmt.Errorf("the load index's pod: %w", err)
	}
	svc, err := p.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "load"},
		Spec: corev1.ServiceSpec{Selector: pod.Labels,
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", "", fmt.Errorf("the load index's Service: %w", err)
	}
	var ip string
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := p.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || got.Status.Phase != corev1.PodRunning {
			return false, nil
		}
		ip = got.Status.PodIP
		return ip != "", nil
	})
	if err != nil {
		return "", "", fmt.Errorf("the load index's pod never ran: %w", err)
	}
	podURL = fmt.Sprintf("http://%s:8080/load", ip)
	if err := waitHTTP(ctx, podURL); err != nil {
		return "", "", err
	}
	return fmt.Sprintf("http://%s/load", svc.Spec.ClusterIP), podURL, nil
}

// waitHTTP waits until url answers at all (any status).
func waitHTTP(ctx context.Context, url string) error {
	c := &http.Client{Timeout: time.Second}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := c.Do(req)
		if err != nil {
			last = err
			return false, nil
		}
		resp.Body.Close()
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%s did not answer: %w (last: %v)", url, err, last)
	}
	return nil
}
