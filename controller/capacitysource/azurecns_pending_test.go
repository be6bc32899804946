package capacitysource

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/capscale/capscale/controller/capacitysource/ipamtest"
)

// TestAzureCNSPendingProgramming is the azure-cns preset through one
// scale-up of CNS v2's pool (issue 55 §4; docs/design/azure-cns-pending.md):
// 16 IPs, the 9th pod scheduled, CNS asks for 32, the delegated network
// controller assigns 16 more at the network container's next version, and
// NMAgent programs that version some time later. Until it has, CNS holds
// the 16 new IPs PendingProgramming and serves none of them; the preset
// counts them from the moment they are in status. The NodeNetworkConfig
// before and after NMAgent programmed the version is the same object:
// nothing the preset could read tells the window apart.
func TestAzureCNSPendingProgramming(t *testing.T) {
	version := func(u *unstructured.Unstructured, v int64) *unstructured.Unstructured {
		ncs, _, _ := unstructured.NestedSlice(u.Object, "status", "networkContainers")
		ncs[0].(map[string]any)["version"] = v
		if err := unstructured.SetNestedSlice(u.Object, ncs, "status", "networkContainers"); err != nil {
			t.Fatal(err)
		}
		return u
	}
	steady := version(ipamtest.NodeNetworkConfig("n1", "u", 16, 16, 0), 1)
	asked := version(ipamtest.NodeNetworkConfig("n1", "u", 32, 16, 0), 1)
	assigned := version(ipamtest.NodeNetworkConfig("n1", "u", 32, 32, 0), 2)
	programmed := version(ipamtest.NodeNetworkConfig("n1", "u", 32, 32, 0), 2)
	src := presetSource(t, "azure-cns")
	for _, tc := range []struct {
		name string
		obj  *unstructured.Unstructured
		// want is the preset's count; serves what CNS can hand out
		// (Available or Assigned, not PendingProgramming).
		want, serves int64
	}{
		{name: "16 assigned, version 1 programmed", obj: steady, want: 16, serves: 16},
		{name: "CNS asked for 32: the request is not counted", obj: asked, want: 16, serves: 16},
		{name: "32 assigned at version 2, NMAgent still at 1: the window", obj: assigned, want: 32, serves: 16},
		{name: "NMAgent programmed version 2", obj: programmed, want: 32, serves: 32},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Evaluate(src, "kube-system", "n1", decoded(t, tc.obj))
			if r.Err != "" || r.Capacity != tc.want {
				t.Fatalf("Evaluate = %+v, want capacity %d", r, tc.want)
			}
			if over := r.Capacity - tc.serves; over > 0 {
				t.Logf("the preset counts %d IPs CNS cannot serve yet", over)
			}
		})
	}
	if !reflect.DeepEqual(decoded(t, assigned), decoded(t, programmed)) {
		t.Fatal("the NodeNetworkConfig in the window and after it differ: a field tells them apart, and the preset should read it")
	}
}
