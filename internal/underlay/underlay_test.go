package underlay

import (
	"strconv"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/capscale/capscale/internal/names"
)

func TestParseCapacity(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    int64
		wantErr string
	}{
		{name: "zero", in: "0", want: 0},
		{name: "plain", in: "3", want: 3},
		{name: "spaces", in: " 12 ", want: 12},
		{name: "largest", in: "1048576", want: 1 << 20},
		{name: "too large", in: "1048577", wantErr: "larger than"},
		{name: "negative", in: "-1", wantErr: "negative"},
		{name: "empty", in: "", wantErr: "empty"},
		{name: "word", in: "ten", wantErr: "not an integer"},
		{name: "quantity suffix", in: "10k", wantErr: "not an integer"},
		{name: "float", in: "1.5", wantErr: "not an integer"},
		{name: "overflow", in: "99999999999999999999", wantErr: "not an integer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCapacity(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseCapacity(%q) error = %v, want one containing %q", tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseCapacity(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
		})
	}
}

// TestNodeCapacity is the order of precedence, one row per pair of
// sources: the per-node annotation, then the capacity mirrored from the
// node's IPAM object (capacity source), then the label, then the default.
// An invalid value at a level is capacity 0 with its reason, never the
// next level.
func TestNodeCapacity(t *testing.T) {
	const (
		key     = names.UnderlayIPCapacityAnnotation
		mirror  = names.UnderlayIPSourceCapacityAnnotation
		origin  = names.UnderlayIPSourceAnnotation
		cilium  = "cilium ciliumnodes.cilium.io/node-1"
		missing = InvalidPrefix + "no ciliumnodes.cilium.io object maps to this node"
	)
	kv := func(kvs ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i+1 < len(kvs); i += 2 {
			m[kvs[i]] = kvs[i+1]
		}
		return m
	}
	tests := []struct {
		name        string
		annotations map[string]string
		labels      map[string]string
		want        Capacity
		// reason is a part of the Invalid reason the row must show.
		reason string
	}{
		{name: "nothing set", want: Capacity{IPs: 7, Source: SourceDefault}},
		{name: "other keys", annotations: kv("a", "b"), labels: kv("a", "b"), want: Capacity{IPs: 7, Source: SourceDefault}},
		{name: "annotated", annotations: kv(key, "3"), want: Capacity{IPs: 3, Source: SourceAnnotation}},
		{name: "annotated zero", annotations: kv(key, "0"), want: Capacity{IPs: 0, Source: SourceAnnotation}},
		{name: "labelled", labels: kv(key, "4"), want: Capacity{IPs: 4, Source: SourceLabel}},
		{name: "annotation overrides label", annotations: kv(key, "2"), labels: kv(key, "4"), want: Capacity{IPs: 2, Source: SourceAnnotation}},
		{name: "invalid annotation", annotations: kv(key, "lots"), want: Capacity{Source: SourceAnnotation}, reason: key + " annotation"},
		{name: "invalid annotation does not fall back to the label", annotations: kv(key, "lots"), labels: kv(key, "4"), want: Capacity{Source: SourceAnnotation}, reason: key + " annotation"},
		{name: "invalid label", labels: kv(key, "-1"), want: Capacity{Source: SourceLabel}, reason: key + " label"},

		{name: "source", annotations: kv(mirror, "12", origin, cilium), want: Capacity{IPs: 12, Source: SourceIPAM, Origin: cilium}},
		{name: "source without origin", annotations: kv(mirror, "12"), want: Capacity{IPs: 12, Source: SourceIPAM}},
		{name: "source zero", annotations: kv(mirror, "0", origin, cilium), want: Capacity{Source: SourceIPAM, Origin: cilium}},
		{name: "annotation overrides source", annotations: kv(key, "2", mirror, "12", origin, cilium), want: Capacity{IPs: 2, Source: SourceAnnotation}},
		{name: "annotation overrides an invalid source", annotations: kv(key, "2", mirror, missing, origin, cilium), want: Capacity{IPs: 2, Source: SourceAnnotation}},
		{name: "invalid annotation does not fall back to the source", annotations: kv(key, "x", mirror, "12"), want: Capacity{Source: SourceAnnotation}, reason: key + " annotation"},
		{name: "source overrides label", annotations: kv(mirror, "12", origin, cilium), labels: kv(key, "4"), want: Capacity{IPs: 12, Source: SourceIPAM, Origin: cilium}},
		{name: "source overrides default", annotations: kv(mirror, "1"), want: Capacity{IPs: 1, Source: SourceIPAM}},
		{name: "invalid source does not fall back to the label", annotations: kv(mirror, missing, origin, cilium), labels: kv(key, "4"),
			want: Capacity{Source: SourceIPAM, Origin: cilium}, reason: mirror + " from capacity source " + cilium + " (no ciliumnodes.cilium.io object maps to this node)"},
		{name: "invalid source does not fall back to the default", annotations: kv(mirror, missing),
			want: Capacity{Source: SourceIPAM}, reason: "from capacity source (no ciliumnodes"},
		{name: "hand-edited source value", annotations: kv(mirror, "lots", origin, cilium), want: Capacity{Source: SourceIPAM, Origin: cilium}, reason: `(not an integer: "lots")`},
		{name: "source value too large", annotations: kv(mirror, "1048577"), want: Capacity{Source: SourceIPAM}, reason: "larger than 1048576"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := NodeCapacity(tc.annotations, tc.labels, 7)
			if got.IPs != tc.want.IPs || got.Source != tc.want.Source || got.Origin != tc.want.Origin || (got.Invalid != "") != (tc.reason != "") {
				t.Fatalf("NodeCapacity = %+v, want %+v (invalid: %v)", got, tc.want, tc.reason != "")
			}
			if tc.reason != "" && !strings.Contains(got.Invalid, tc.reason) {
				t.Errorf("reason %q does not contain %q", got.Invalid, tc.reason)
			}
		})
	}
}

func TestPodNeed(t *testing.T) {
	rn := v1.ResourceName(names.UnderlayIPResource)
	q := func(n int64) resource.Quantity { return *resource.NewQuantity(n, resource.DecimalSI) }
	req := func(n int64) v1.ResourceRequirements {
		return v1.ResourceRequirements{Requests: v1.ResourceList{rn: q(n)}, Limits: v1.ResourceList{rn: q(n)}}
	}
	always := v1.ContainerRestartPolicyAlways
	tests := []struct {
		name string
		spec v1.PodSpec
		want int64
	}{
		{name: "no request", spec: v1.PodSpec{Containers: []v1.Container{{}}}, want: 0},
		{name: "limit only", spec: v1.PodSpec{Containers: []v1.Container{{Resources: v1.ResourceRequirements{Limits: v1.ResourceList{rn: q(2)}}}}}, want: 2},
		{name: "request wins over limit", spec: v1.PodSpec{Containers: []v1.Container{{Resources: v1.ResourceRequirements{Requests: v1.ResourceList{rn: q(1)}, Limits: v1.ResourceList{rn: q(3)}}}}}, want: 1},
		{name: "containers sum", spec: v1.PodSpec{Containers: []v1.Container{{Resources: req(1)}, {Resources: req(2)}}}, want: 3},
		{name: "init container larger", spec: v1.PodSpec{
			InitContainers: []v1.Container{{Resources: req(4)}},
			Containers:     []v1.Container{{Resources: req(1)}},
		}, want: 4},
		{name: "sidecar adds to app and later init", spec: v1.PodSpec{
			InitContainers: []v1.Container{{Resources: req(1), RestartPolicy: &always}, {Resources: req(2)}},
			Containers:     []v1.Container{{Resources: req(1)}},
		}, want: 3},
		{name: "overhead", spec: v1.PodSpec{Containers: []v1.Container{{Resources: req(1)}}, Overhead: v1.ResourceList{rn: q(1)}}, want: 2},
		{name: "negative clamps", spec: v1.PodSpec{Containers: []v1.Container{{Resources: req(-5)}}}, want: 0},
		{name: "huge clamps", spec: v1.PodSpec{Containers: []v1.Container{{Resources: req(1 << 40)}}}, want: MaxCapacity},
		{name: "other resources ignored", spec: v1.PodSpec{Containers: []v1.Container{{Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: q(4)}}}}}, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := PodNeed(&v1.Pod{Spec: tc.spec}); got != tc.want {
				t.Fatalf("PodNeed = %d, want %d", got, tc.want)
			}
		})
	}
	if got := PodNeed(nil); got != 0 {
		t.Errorf("PodNeed(nil) = %d, want 0", got)
	}
}

func FuzzParseCapacity(f *testing.F) {
	for _, s := range []string{"0", "10", " 3 ", "-1", "1048576", "1048577", "1e3", "0x10", "+5", "", "ten", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseCapacity(s)
		if err != nil {
			if v != 0 {
				t.Fatalf("error with value %d", v)
			}
			return
		}
		if v < 0 || v > MaxCapacity {
			t.Fatalf("ParseCapacity(%q) = %d out of range", s, v)
		}
		if again, err := ParseCapacity(strconv.FormatInt(v, 10)); err != nil || again != v {
			t.Fatalf("round trip of %d: %d, %v", v, again, err)
		}
	})
}
