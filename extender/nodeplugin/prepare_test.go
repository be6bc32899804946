package nodeplugin

import (
	"reflect"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// claim is an allocated claim whose results are driver/pool/device triples.
func claim(uid string, results ...[3]string) *resourcev1.ResourceClaim {
	c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c-" + uid, Namespace: "ns", UID: types.UID(uid)}}
	c.Status.Allocation = &resourcev1.AllocationResult{}
	for _, r := range results {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourcev1.DeviceRequestAllocationResult{
			Request: "container-0-request-0", Driver: r[0], Pool: r[1], Device: r[2],
		})
	}
	return c
}

func TestPrepare(t *testing.T) {
	dev := func(pool, name string) kubeletplugin.Device {
		return kubeletplugin.Device{Requests: []string{"container-0-request-0"}, PoolName: pool, DeviceName: name}
	}
	unallocated := claim("u")
	unallocated.Status.Allocation = nil
	for _, tc := range []struct {
		name    string
		claims  []*resourcev1.ResourceClaim
		want    map[types.UID][]kubeletplugin.Device
		wantErr map[types.UID]string
	}{
		{
			name:   "three IPs of this node: the devices, no CDI device",
			claims: []*resourcev1.ResourceClaim{claim("a", [3]string{Driver, "n1", "ip-0"}, [3]string{Driver, "n1", "ip-4"}, [3]string{Driver, "n1", "ip-7"})},
			want:   map[types.UID][]kubeletplugin.Device{"a": {dev("n1", "ip-0"), dev("n1", "ip-4"), dev("n1", "ip-7")}},
		},
		{
			name: "each claim on its own; another driver's devices are not ours",
			claims: []*resourcev1.ResourceClaim{
				claim("a", [3]string{Driver, "n1", "ip-1"}),
				claim("b", [3]string{"gpu.example.com", "n1", "gpu-0"}, [3]string{Driver, "n1", "ip-2"}),
			},
			want: map[types.UID][]kubeletplugin.Device{"a": {dev("n1", "ip-1")}, "b": {dev("n1", "ip-2")}},
		},
		{
			name:   "no device of the driver: prepared to nothing",
			claims: []*resourcev1.ResourceClaim{claim("a", [3]string{"gpu.example.com", "n1", "gpu-0"})},
			want:   map[types.UID][]kubeletplugin.Device{"a": {}},
		},
		{
			name: "an IP of another node fails that claim only",
			claims: []*resourcev1.ResourceClaim{
				claim("a", [3]string{Driver, "n1", "ip-1"}, [3]string{Driver, "n2", "ip-1"}),
				claim("b", [3]string{Driver, "n1", "ip-3"}),
			},
			want:    map[types.UID][]kubeletplugin.Device{"b": {dev("n1", "ip-3")}},
			wantErr: map[types.UID]string{"a": "holds underlay IP ip-1 of node n2, not of this node n1"},
		},
		{
			name:    "not allocated",
			claims:  []*resourcev1.ResourceClaim{unallocated},
			wantErr: map[types.UID]string{"u": "is not allocated"},
		},
		{name: "no claims", want: map[types.UID][]kubeletplugin.Device{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Prepare("n1", tc.claims)
			if len(got) != len(tc.claims) {
				t.Fatalf("%d results for %d claims: %+v", len(got), len(tc.claims), got)
			}
			for uid, r := range got {
				if want, ok := tc.wantErr[uid]; ok {
					if r.Err == nil || !strings.Contains(r.Err.Error(), want) || r.Devices != nil {
						t.Errorf("claim %s: %+v, want the error %q and no devices", uid, r, want)
					}
					continue
				}
				if r.Err != nil || !reflect.DeepEqual(r.Devices, tc.want[uid]) {
					t.Errorf("claim %s: %+v, want devices %+v", uid, r, tc.want[uid])
				}
				for _, d := range r.Devices {
					if len(d.CDIDeviceIDs) > 0 {
						t.Errorf("claim %s: CDI devices %v; an IP injects nothing", uid, d.CDIDeviceIDs)
					}
				}
			}
		})
	}
}

func TestUnprepare(t *testing.T) {
	got := Unprepare([]kubeletplugin.NamespacedObject{{UID: "a"}, {UID: "b"}})
	if len(got) != 2 || got["a"] != nil || got["b"] != nil {
		t.Errorf("Unprepare: %v, want nil for both claims", got)
	}
}
