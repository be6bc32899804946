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

func TestNodeCapacity(t *testing.T) {
	const key = names.UnderlayIPCapacityAnnotation
	kv := func(v string) map[string]string { return map[string]string{key: v} }
	tests := []struct {
		name        string
		annotations map[string]string
		labels      map[string]string
		want        Capacity
	}{
		{name: "nothing set", want: Capacity{IPs: 7, Source: SourceDefault}},
		{name: "other keys", annotations: map[string]string{"a": "b"}, labels: map[string]string{"a": "b"}, want: Capacity{IPs: 7, Source: SourceDefault}},
		{name: "annotated", annotations: kv("3"), want: Capacity{IPs: 3, Source: SourceAnnotation}},
		{name: "annotated zero", annotations: kv("0"), want: Capacity{IPs: 0, Source: SourceAnnotation}},
		{name: "labelled", labels: kv("4"), want: Capacity{IPs: 4, Source: SourceLabel}},
		{name: "annotation overrides label", annotations: kv("2"), labels: kv("4"), want: Capacity{IPs: 2, Source: SourceAnnotation}},
		{name: "invalid annotation", annotations: kv("lots"), want: Capacity{Source: SourceAnnotation, Invalid: "annotation"}},
		{name: "invalid annotation does not fall back to the label", annotations: kv("lots"), labels: kv("4"), want: Capacity{Source: SourceAnnotation, Invalid: "annotation"}},
		{name: "invalid label", labels: kv("-1"), want: Capacity{Source: SourceLabel, Invalid: "label"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := NodeCapacity(tc.annotations, tc.labels, 7)
			if got.IPs != tc.want.IPs || got.Source != tc.want.Source || (got.Invalid != "") != (tc.want.Invalid != "") {
				t.Fatalf("NodeCapacity = %+v, want %+v", got, tc.want)
			}
			if tc.want.Invalid != "" && !strings.Contains(got.Invalid, key+" "+tc.want.Invalid) {
				t.Errorf("reason %q does not name the %s %s", got.Invalid, key, tc.want.Invalid)
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
