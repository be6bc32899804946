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
	tests := []struct {
		name        string
		annotations map[string]string
		want        int64
		wantReason  bool
	}{
		{name: "no annotations", want: 7},
		{name: "other annotations", annotations: map[string]string{"a": "b"}, want: 7},
		{name: "annotated", annotations: map[string]string{names.UnderlayIPCapacityAnnotation: "3"}, want: 3},
		{name: "annotated zero", annotations: map[string]string{names.UnderlayIPCapacityAnnotation: "0"}, want: 0},
		{name: "invalid", annotations: map[string]string{names.UnderlayIPCapacityAnnotation: "lots"}, want: 0, wantReason: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, reason := NodeCapacity(tc.annotations, 7)
			if got != tc.want || (reason != "") != tc.wantReason {
				t.Fatalf("NodeCapacity = %d, %q; want %d, reason %v", got, reason, tc.want, tc.wantReason)
			}
			if tc.wantReason && !strings.Contains(reason, names.UnderlayIPCapacityAnnotation) {
				t.Errorf("reason %q does not name the annotation", reason)
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
