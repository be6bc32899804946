package kubectl

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/capscale/capscale/internal/ipreport"
	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// run runs the command line against client and returns stdout, stderr
// and the error main would print.
func run(t *testing.T, client kubernetes.Interface, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
	s := &session{flags: genericclioptions.NewConfigFlags(false), streams: streams, newClient: func() (kubernetes.Interface, error) {
		if client == nil {
			t.Fatalf("%v: reached the apiserver; want the flags refused first", args)
		}
		return client, nil
	}}
	err := execute(context.Background(), newCommand(s), streams, append(args, "--namespace", "shop"))
	return out.String(), errOut.String(), err
}

func TestFlagValidation(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ips", "--min-free", "-1"}, "--min-free must be 0 or more"},
		{[]string{"ips", "--full", "--min-free", "2"}, "cannot both hold"},
		{[]string{"ips", "--sort-by", "age"}, `--sort-by="age": must be one of name, free, used, capacity`},
		{[]string{"ips", "-o", "xml"}, `--output="xml": must be one of wide, json, yaml`},
		{[]string{"ips", "--default-capacity", "-3"}, "--default-capacity must be within"},
		{[]string{"ips", "--min-free", "many"}, `invalid argument "many"`},
		{[]string{"stop", "deployment"}, "name the workload as TYPE/NAME or TYPE NAME"},
		{[]string{"stop", "pods/web"}, `resource "pods" is not served here; use one of deployments, statefulsets`},
		{[]string{"stop", "daemonset/agent"}, `resource "daemonsets" is not served here`},
		{[]string{"stop", "deploy/web", "-o", "wide"}, `--output="wide": must be one of json, yaml`},
		{[]string{"scale", "deploy/web"}, `required flag(s) "replicas" not set`},
		{[]string{"scale", "deploy/web", "--replicas", "x"}, `invalid argument "x"`},
		{[]string{"max", "deploy/web", "--default-capacity", "-1"}, "--default-capacity must be within"},
		{[]string{"restart", "a/b/c"}, `"b/c" is not a workload name`},
		{[]string{"stop"}, "accepts between 1 and 2 arg(s)"},
	} {
		_, _, err := run(t, nil, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

func cluster() *fake.Clientset {
	n := func(name, capacity string) *v1.Node {
		o := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if capacity != "" {
			o.Annotations = map[string]string{names.UnderlayIPCapacityAnnotation: capacity}
		}
		return o
	}
	p := func(name, node string, ips int64) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}, Spec: v1.PodSpec{NodeName: node, Containers: []v1.Container{{
			Name: "c", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{underlay.Resource: *resource.NewQuantity(ips, resource.DecimalSI)}}}}},
			Status: v1.PodStatus{Phase: v1.PodRunning}}
	}
	pending := p("late", "", 1)
	pending.Status.Phase = v1.PodPending
	published := n("node-c", "")
	// Read by the mirror, no source covers it: the label or the default.
	published.Annotations = map[string]string{names.UnderlayIPSourceAnnotation: names.UnderlayIPSourceNone}
	published.Status.Allocatable = v1.ResourceList{underlay.Resource: resource.MustParse("10")}
	// Capacity sources: node-d's CiliumNode gives 4, node-e has none.
	mirrored := func(name, value string) *v1.Node {
		o := n(name, "")
		o.Annotations = map[string]string{names.UnderlayIPSourceCapacityAnnotation: value,
			names.UnderlayIPSourceAnnotation: "cilium ciliumnodes.cilium.io/" + name}
		return o
	}
	// A pod of the marked namespace shop created before the admission
	// policy: it holds an IP nobody counts. A hostNetwork one holds none.
	shop := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{names.UnderlayNamespaceLabel: "true"}}}
	old := p("old-web", "node-d", 0)
	old.Spec.Containers[0].Resources = v1.ResourceRequirements{}
	hostNet := p("agent", "node-d", 0)
	hostNet.Spec.Containers[0].Resources = v1.ResourceRequirements{}
	hostNet.Spec.HostNetwork = true
	return fake.NewClientset(n("node-a", "3"), n("node-b", "oops"), published,
		mirrored("node-d", "4"), mirrored("node-e", "invalid: no ciliumnodes.cilium.io object maps to this node"),
		p("web-1", "node-a", 2), p("web-2", "node-c", 1), pending, shop, old, hostNet)
}

func TestIPsTable(t *testing.T) {
	out, errOut, err := run(t, cluster(), "ips")
	if err != nil {
		t.Fatal(err)
	}
	want := `NODE              CAPACITY   USED   FREE   WAITING   SOURCE                                                 PUBLISHED
node-a            3          2      1      0         annotation                                             -
node-b            0          0      0      0         invalid annotation                                     -
node-c            10         1      9      0         default                                                10
node-d            4          0      4      0         source cilium (ciliumnodes.cilium.io/node-d)           -
node-e            0          0      0      0         invalid source cilium (ciliumnodes.cilium.io/node-e)   -
TOTAL (5 nodes)   17         3      14     1         2 full, 2 invalid                                      
`
	if out != want {
		t.Errorf("table:\n%s\nwant:\n%s", out, want)
	}
	wantWarning := "Warning: 1 pods in namespaces labelled capscale.io/underlay=true hold an underlay IP that nobody counts (not hostNetwork, no capscale.io/underlay-ip request; created before the admission policy?): shop/old-web on node-d."
	if !strings.HasPrefix(errOut, wantWarning) {
		t.Errorf("stderr %q, want the warning %q", errOut, wantWarning)
	}
	out, errOut, err = run(t, cluster(), "ips", "-o", "wide", "--min-free", "1", "--no-headers", "-l", "!gpu")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "shop/web-1=2") || !strings.Contains(lines[3], "waiting: shop/late=1") || strings.HasPrefix(lines[0], "NODE") {
		t.Errorf("wide, --min-free 1, --no-headers:\n%s", out)
	}
	// node-d is shown: its uncounted pod too.
	if !strings.Contains(errOut, "shop/old-web on node-d") {
		t.Errorf("stderr %q lacks the uncounted pod of a node shown", errOut)
	}
	if _, errOut, _ = run(t, cluster(), "ips", "node-a"); errOut != "" {
		t.Errorf("a node without uncounted pods: stderr %q, want nothing", errOut)
	}
}

// TestIPsWithoutNamespaceList: a user who may not list namespaces still
// gets the report, and is told why no uncounted pod is named.
func TestIPsWithoutNamespaceList(t *testing.T) {
	c := cluster()
	c.PrependReactor("list", "namespaces", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "namespaces"}, "", errForbidden)
	})
	out, errOut, err := run(t, c, "ips")
	if err != nil || !strings.Contains(out, "node-d") {
		t.Fatalf("ips: %v\n%s", err, out)
	}
	if !strings.Contains(errOut, "Warning: cannot tell which pods hold an underlay IP nobody counts") || !strings.Contains(errOut, "list on namespaces") {
		t.Errorf("stderr %q", errOut)
	}
}

func TestIPsDataFormats(t *testing.T) {
	// report runs ips in format and decodes what it printed.
	report := func(format string, args ...string) ipreport.Report {
		t.Helper()
		out, _, err := run(t, cluster(), append([]string{"ips", "-o", format}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		var rep ipreport.Report
		if format == "json" {
			err = json.Unmarshal([]byte(out), &rep)
		} else {
			err = yaml.UnmarshalStrict([]byte(out), &rep)
		}
		if err != nil {
			t.Fatalf("%s: %v\n%s", format, err, out)
		}
		return rep
	}
	for _, format := range []string{"json", "yaml"} {
		rep := report(format, "node-a")
		if len(rep.Nodes) != 1 || rep.Nodes[0].Name != "node-a" || rep.Nodes[0].Free != 1 || rep.Nodes[0].Holders[0].Name != "web-1" || rep.Totals.Waiting != 1 {
			t.Errorf("%s: %+v", format, rep)
		}
		rep = report(format, "node-d")
		want := []ipreport.UncountedPod{{Namespace: "shop", Name: "old-web", Node: "node-d"}}
		if !slices.Equal(rep.Uncounted, want) || rep.Nodes[0].Uncounted != 1 || rep.Nodes[0].Origin != "cilium ciliumnodes.cilium.io/node-d" {
			t.Errorf("%s: uncounted %+v, node %+v; want %+v and the origin", format, rep.Uncounted, rep.Nodes[0], want)
		}
	}
	if _, _, err := run(t, cluster(), "ips", "node-z"); err == nil || !strings.Contains(err.Error(), "nodes not found: node-z") {
		t.Errorf("unknown node: %v", err)
	}
}

func deployment(replicas int32) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas)}}
}

func TestStopStart(t *testing.T) {
	c := fake.NewClientset(deployment(3))
	out, _, err := run(t, c, "stop", "deploy/web")
	if err != nil || out != "deployment.apps/web stopped; start will restore 3 replicas\n" {
		t.Fatalf("stop: %q %v", out, err)
	}
	d, _ := c.AppsV1().Deployments("shop").Get(context.Background(), "web", metav1.GetOptions{})
	if *d.Spec.Replicas != 0 || d.Annotations[names.ReplicasBeforeStopAnnotation] != "3" {
		t.Fatalf("after stop: replicas %d, annotations %v", *d.Spec.Replicas, d.Annotations)
	}
	out, _, err = run(t, c, "start", "deployments.apps", "web", "-o", "json")
	var started struct{ Replicas int32 }
	if err != nil || json.Unmarshal([]byte(out), &started) != nil || started.Replicas != 3 {
		t.Fatalf("start: %q %v", out, err)
	}
	if _, _, err := run(t, c, "start", "deploy/web", "--replicas", "0"); err == nil || !strings.Contains(err.Error(), "--replicas: must be at least 1") {
		t.Errorf("start --replicas 0: %v", err)
	}
	c = fake.NewClientset(deployment(0))
	if _, _, err := run(t, c, "start", "deploy/web"); err == nil || !strings.Contains(err.Error(), "start with --replicas N") {
		t.Errorf("start with nothing remembered: %v, want the flag that overcomes it", err)
	}
}

func TestForbiddenNamesTheRole(t *testing.T) {
	c := fake.NewClientset(deployment(3))
	c.PrependReactor("update", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "web",
			errForbidden)
	})
	_, _, err := run(t, c, "stop", "deploy/web")
	if err == nil || !strings.Contains(err.Error(), `cannot update resource "deployments"`) || !strings.Contains(err.Error(), "ClusterRole capscale-workload:stop-start") {
		t.Errorf("stop refused by RBAC: %v, want the apiserver's words and the role", err)
	}
	if d, _ := c.AppsV1().Deployments("shop").Get(context.Background(), "web", metav1.GetOptions{}); *d.Spec.Replicas != 3 || d.Annotations != nil {
		t.Errorf("a refused stop changed the deployment: %+v", d)
	}
}

var errForbidden = forbidden(`User "alice" cannot update resource "deployments" in API group "apps" in the namespace "shop"`)

type forbidden string

func (f forbidden) Error() string { return string(f) }

func TestScaleRefusedByHPA(t *testing.T) {
	c := fake.NewClientset(deployment(2))
	c.PrependReactor("list", "horizontalpodautoscalers", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, hpaList("web", 1, 4), nil
	})
	if _, _, err := run(t, c, "scale", "deploy/web", "--replicas", "6"); err == nil || !strings.Contains(err.Error(), "add --adjust-hpa") {
		t.Errorf("scale under an HPA: %v, want the refusal with its flag", err)
	}
}

func hpaList(target string, minR, maxR int32) *autoscalingv2.HorizontalPodAutoscalerList {
	return &autoscalingv2.HorizontalPodAutoscalerList{Items: []autoscalingv2.HorizontalPodAutoscaler{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: target},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{MinReplicas: ptr.To(minR), MaxReplicas: maxR,
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: target}},
	}}}
}

// TestIPsMayGrowTo: a node whose capacity source says what its pool may
// grow to shows it beside the capacity, which stays what is counted.
func TestIPsMayGrowTo(t *testing.T) {
	node := func(name string, ann map[string]string) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann}}
	}
	src := func(name, capacity, max string) map[string]string {
		a := map[string]string{names.UnderlayIPSourceCapacityAnnotation: capacity,
			names.UnderlayIPSourceAnnotation: "cilium ciliumnodes.cilium.io/" + name}
		if max != "" {
			a[names.UnderlayIPSourceMaxCapacityAnnotation] = max
		}
		return a
	}
	cs := fake.NewClientset(node("node-a", src("node-a", "12", "29")), node("node-b", src("node-b", "8", "invalid: maxCapacity expression: no such key")),
		node("node-c", src("node-c", "5", "")))
	out, _, err := run(t, cs, "ips")
	if err != nil {
		t.Fatal(err)
	}
	want := `NODE              CAPACITY   USED   FREE   WAITING   SOURCE                                         MAY-GROW-TO
node-a            12         0      12     0         source cilium (ciliumnodes.cilium.io/node-a)   29
node-b            8          0      8      0         source cilium (ciliumnodes.cilium.io/node-b)   invalid
node-c            5          0      5      0         source cilium (ciliumnodes.cilium.io/node-c)   -
TOTAL (3 nodes)   25         0      25     0         0 full, 0 invalid                              
`
	if out != want {
		t.Errorf("table:\n%s\nwant:\n%s", out, want)
	}
	out, _, err = run(t, cs, "ips", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `"maxCapacity": 29`) || !strings.Contains(out, `"maxCapacityInvalid": "maxCapacity expression: no such key"`) {
		t.Errorf("json lacks the max capacity:\n%s", out)
	}
}
