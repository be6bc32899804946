package devices

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
)

// TestPublishedDevicesGauge: capscale_extender_published_devices is the
// devices of the driver's slices in the cache, over all nodes (a first
// version registered the gauge and never set it: TestDRAMode/metrics read
// 0 at 33 devices).
func TestPublishedDevicesGauge(t *testing.T) {
	cs := fake.NewClientset()
	reg := prometheus.NewRegistry()
	p, err := New(cs, informers.NewSharedInformerFactory(cs, 0).Core().V1().Nodes(), Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(p.devices); got != 0 {
		t.Errorf("no slices: %v devices, want 0", got)
	}
	other := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: "gpu.example.com", Devices: []resourcev1.Device{{Name: "gpu-0"}},
	}}
	for _, s := range append(Slices("n1", "uid-1", 1, Names(3, nil), false), append(Slices("n2", "uid-2", 4, Names(130, nil), false), other)...) {
		if err := p.slices.GetStore().Add(s); err != nil {
			t.Fatal(err)
		}
	}
	if got := testutil.ToFloat64(p.devices); got != 133 {
		t.Errorf("3 and 130 devices of %s on two nodes (three slices) and a GPU: %v devices, want 133", Driver, got)
	}
	if n, err := testutil.GatherAndCount(reg, "capscale_extender_published_devices"); err != nil || n != 1 {
		t.Errorf("registered published_devices series: %d, %v", n, err)
	}
}
