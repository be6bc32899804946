package kubectl

import (
	"os"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"github.com/capscale/capscale/internal/names"
)

func typedNode(name, instanceType string, annotations, labels map[string]string) *v1.Node {
	l := map[string]string{v1.LabelInstanceTypeStable: instanceType}
	if instanceType == "" {
		l = map[string]string{}
	}
	for k, v := range labels {
		l[k] = v
	}
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations, Labels: l}}
}

// TestAutoscalerOverlayIsTheExample: the overlay printed for the example's
// budget is deploy/examples/karpenter/nodeoverlay.yaml, which the
// Karpenter e2e applies.
func TestAutoscalerOverlayIsTheExample(t *testing.T) {
	out, _, err := run(t, nil, "autoscaler", "--instance-type", "c-4x-amd64-linux", "--capacity", "8")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../deploy/examples/karpenter/nodeoverlay.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var got, want map[string]any
	if err := yaml.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if err := yaml.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("printed overlay\n%s\nis not deploy/examples/karpenter/nodeoverlay.yaml\n%s", out, b)
	}
	if !strings.HasPrefix(out, "# Cluster Autoscaler's node-template tag for c-4x-amd64-linux: k8s.io/cluster-autoscaler/node-template/resources/capscale.io/underlay-ip=8\n") {
		t.Errorf("no Cluster Autoscaler tag comment first:\n%s", out)
	}
}

// TestAutoscalerFromNodes: the budgets come from the nodes by the rule
// (annotation over label over default), one per instance type.
func TestAutoscalerFromNodes(t *testing.T) {
	capA, capL := names.UnderlayIPCapacityAnnotation, names.UnderlayIPCapacityLabel
	client := fake.NewClientset(
		typedNode("a1", "m5.large", nil, map[string]string{capL: "9", "pool": "web"}),
		typedNode("a2", "m5.large", map[string]string{capA: "9"}, map[string]string{capL: "3", "pool": "web"}),
		typedNode("b1", "Standard_D4s_v5", nil, map[string]string{"pool": "web"}),
		typedNode("c1", "c-4x-amd64-linux", nil, map[string]string{capL: "8", "pool": "batch"}),
	)
	out, _, err := run(t, client, "autoscaler", "-l", "pool=web", "-o", "tags")
	if err != nil {
		t.Fatal(err)
	}
	const key = "k8s.io/cluster-autoscaler/node-template/resources/capscale.io/underlay-ip"
	want := "Standard_D4s_v5 " + key + "=10\nm5.large " + key + "=9\n"
	if out != want {
		t.Errorf("tags:\n%s\nwant\n%s", out, want)
	}
	out, _, err = run(t, client, "autoscaler", "-l", "pool=web", "--default-capacity", "16")
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(out, "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("want two overlays, got:\n%s", out)
	}
	for i, w := range []struct{ name, it, ips string }{
		{"capscale-underlay-ip-standard-d4s-v5", "Standard_D4s_v5", "16"},
		{"capscale-underlay-ip-m5-large", "m5.large", "9"},
	} {
		var o struct {
			Kind     string
			Metadata struct{ Name string }
			Spec     struct {
				Requirements []struct {
					Key, Operator string
					Values        []string
				}
				Capacity map[string]string
			}
		}
		if err := yaml.Unmarshal([]byte(docs[i]), &o); err != nil {
			t.Fatal(err)
		}
		r := o.Spec.Requirements
		if o.Kind != "NodeOverlay" || o.Metadata.Name != w.name || len(r) != 1 || r[0].Key != v1.LabelInstanceTypeStable ||
			r[0].Operator != "In" || len(r[0].Values) != 1 || r[0].Values[0] != w.it || o.Spec.Capacity[names.UnderlayIPResource] != w.ips {
			t.Errorf("overlay %d: %+v, want %+v", i, o, w)
		}
	}
	out, _, err = run(t, client, "autoscaler", "c1", "-o", "json")
	if err != nil || !strings.Contains(out, `"kind": "List"`) || !strings.Contains(out, `"capscale.io/underlay-ip": "8"`) {
		t.Errorf("-o json for c1: %v\n%s", err, out)
	}
}

func TestAutoscalerRefuses(t *testing.T) {
	capL := names.UnderlayIPCapacityLabel
	client := fake.NewClientset(
		typedNode("a1", "m5.large", nil, map[string]string{capL: "9"}),
		typedNode("a2", "m5.large", nil, map[string]string{capL: "6"}),
		typedNode("bad", "m5.xlarge", nil, map[string]string{capL: "lots"}),
		typedNode("bare", "", nil, nil),
	)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"a1", "a2"}, "node a1 has 9 underlay IPs, node a2 has 6"},
		{[]string{"bad"}, "node bad (m5.xlarge): its underlay-IP capacity is invalid"},
		{[]string{"bare"}, "node bare has no node.kubernetes.io/instance-type label"},
		{[]string{"nosuch"}, "no node matched"},
	} {
		if _, _, err := run(t, client, append([]string{"autoscaler"}, tc.args...)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--instance-type", "m5.large"}, "--instance-type and --capacity go together"},
		{[]string{"--capacity", "3"}, "--instance-type and --capacity go together"},
		{[]string{"a1", "--instance-type", "m5.large", "--capacity", "3"}, "read no node"},
		{[]string{"--instance-type", "m5.large", "--capacity", "2000000"}, "--capacity must be within"},
		{[]string{"-o", "wide"}, `--output="wide": must be one of yaml, json, tags`},
	} {
		if _, _, err := run(t, nil, append([]string{"autoscaler"}, tc.args...)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}
