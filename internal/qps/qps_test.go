package qps

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/capscale/capscale/internal/names"
)

func TestDesiredReplicasFromAnnotations(t *testing.T) {
	tests := []struct {
		name    string
		total   *string
		single  *string
		want    int64
		wantErr string // substring; names the annotation
	}{
		{name: "issue example 800/500", total: ptr("800"), single: ptr("500"), want: 2},
		{name: "1800/500", total: ptr("1800"), single: ptr("500"), want: 4},
		{name: "exact multiple", total: ptr("1000"), single: ptr("500"), want: 2},
		{name: "decimal that float64 gets wrong", total: ptr("1.1"), single: ptr("0.1"), want: 11},
		{name: "another inexact decimal", total: ptr("0.3"), single: ptr("0.1"), want: 3},
		{name: "zero total", total: ptr("0"), single: ptr("500"), want: 0},
		{name: "tiny total still needs one", total: ptr("0.001"), single: ptr("500"), want: 1},
		{name: "spaces are trimmed", total: ptr(" 800 "), single: ptr("500\n"), want: 2},
		{name: "exponent", total: ptr("8e2"), single: ptr("5e2"), want: 2},
		{name: "capped at MaxInt32", total: ptr("1e300"), single: ptr("0.5"), want: math.MaxInt32},
		{name: "missing total", single: ptr("500"), wantErr: names.TotalQPSAnnotation + " is not set"},
		{name: "missing single", total: ptr("800"), wantErr: names.SinglePodQPSAnnotation + " is not set"},
		{name: "zero single", total: ptr("800"), single: ptr("0"), wantErr: names.SinglePodQPSAnnotation},
		{name: "negative single", total: ptr("800"), single: ptr("-5"), wantErr: names.SinglePodQPSAnnotation},
		{name: "negative total", total: ptr("-1"), single: ptr("500"), wantErr: names.TotalQPSAnnotation},
		{name: "single not a number", total: ptr("800"), single: ptr("fast"), wantErr: names.SinglePodQPSAnnotation},
		{name: "total not a number", total: ptr("lots"), single: ptr("500"), wantErr: names.TotalQPSAnnotation},
		{name: "fraction syntax rejected", total: ptr("1/3"), single: ptr("500"), wantErr: names.TotalQPSAnnotation},
		{name: "NaN rejected", total: ptr("NaN"), single: ptr("500"), wantErr: names.TotalQPSAnnotation},
		{name: "Inf rejected", total: ptr("800"), single: ptr("+Inf"), wantErr: names.SinglePodQPSAnnotation},
		{name: "overflow rejected", total: ptr("1e400"), single: ptr("500"), wantErr: names.TotalQPSAnnotation},
		{name: "empty rejected", total: ptr(""), single: ptr("500"), wantErr: names.TotalQPSAnnotation},
		{name: "too long rejected", total: ptr(strings.Repeat("1", 100)), single: ptr("500"), wantErr: names.TotalQPSAnnotation},
		{name: "huge negative exponent does not hang", total: ptr("1e-99999999"), single: ptr("500"), want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ann := map[string]string{"unrelated": "x"}
			if tc.total != nil {
				ann[names.TotalQPSAnnotation] = *tc.total
			}
			if tc.single != nil {
				ann[names.SinglePodQPSAnnotation] = *tc.single
			}
			got, err := DesiredReplicasFromAnnotations(ann)
			if tc.wantErr != "" {
				var ae *AnnotationError
				if err == nil || !errors.As(err, &ae) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want an AnnotationError containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if got != tc.want {
				t.Errorf("desired = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestDesiredReplicasForQPSNeverDividesByZero(t *testing.T) {
	if got := DesiredReplicas(Value{}, Value{}); got != 0 {
		t.Errorf("zero values: got %d, want 0", got)
	}
}

func TestRealQPS(t *testing.T) {
	single, err := ParseSinglePod(map[string]string{names.SinglePodQPSAnnotation: "500"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		ready int32
		want  float64
	}{
		{name: "two ready", ready: 2, want: 1000},
		{name: "none ready", ready: 0, want: 0},
		{name: "negative is none", ready: -1, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Real(tc.ready, single); got != tc.want {
				t.Errorf("Real(%d) = %v, want %v", tc.ready, got, tc.want)
			}
		})
	}
}

func ptr(s string) *string { return &s }
