package kedascaler

import (
	"errors"
	"strings"
	"testing"
)

func TestParseTrigger(t *testing.T) {
	tests := []struct {
		name           string
		md             map[string]string
		wantSelector   string
		wantTarget     float64
		wantActivation float64
		wantKey        string // a MetadataError for this key
		wantErr        string
	}{
		{
			name:         "load index",
			md:           map[string]string{"metric": "capscale-load-index", "source": "gpu-load", "targetValue": "0.7", "scalerAddress": "x:9443", "enableTLS": "true"},
			wantSelector: "source=gpu-load", wantTarget: 0.7,
		},
		{
			name:         "QPS desired replicas: target 1 implied",
			md:           map[string]string{"metric": "capscale-desired-replicas", "workload": "web", "policy": "qps"},
			wantSelector: "policy=qps,workload=web", wantTarget: 1,
		},
		{
			name:         "load-step desired replicas, target 1 spelled out, activation",
			md:           map[string]string{"metric": "capscale-desired-replicas", "workload": "gpu", "policy": "load-step", "targetValue": "1", "activationThreshold": "2"},
			wantSelector: "policy=load-step,workload=gpu", wantTarget: 1, wantActivation: 2,
		},
		{
			name:         "unknown metric names pass to the provider, which names them",
			md:           map[string]string{"metric": "queue-length", "targetValue": "5"},
			wantSelector: "", wantTarget: 5,
		},
		{name: "no metric", md: map[string]string{"source": "gpu-load", "targetValue": "1"}, wantKey: "metric", wantErr: "missing"},
		{name: "empty metadata", md: nil, wantKey: "metric", wantErr: "missing"},
		{name: "no target", md: map[string]string{"metric": "capscale-load-index", "source": "s"}, wantKey: "targetValue", wantErr: "missing: capscale-load-index needs"},
		{name: "target not a number", md: map[string]string{"metric": "capscale-load-index", "source": "s", "targetValue": "high"}, wantKey: "targetValue", wantErr: `must be a number > 0, got "high"`},
		{name: "target zero", md: map[string]string{"metric": "capscale-total-qps", "workload": "w", "targetValue": "0"}, wantKey: "targetValue", wantErr: "> 0"},
		{name: "target NaN", md: map[string]string{"metric": "capscale-load-index", "source": "s", "targetValue": "NaN"}, wantKey: "targetValue", wantErr: "> 0"},
		{name: "target Inf", md: map[string]string{"metric": "capscale-load-index", "source": "s", "targetValue": "+Inf"}, wantKey: "targetValue", wantErr: "> 0"},
		{name: "replica count with another target", md: map[string]string{"metric": "capscale-desired-replicas", "workload": "w", "policy": "qps", "targetValue": "2"}, wantKey: "targetValue", wantErr: "its target is 1"},
		{name: "negative activation", md: map[string]string{"metric": "capscale-load-index", "source": "s", "targetValue": "1", "activationThreshold": "-1"}, wantKey: "activationThreshold", wantErr: ">= 0"},
		{name: "activation not a number", md: map[string]string{"metric": "capscale-load-index", "source": "s", "targetValue": "1", "activationThreshold": "some"}, wantKey: "activationThreshold", wantErr: ">= 0"},
		{name: "label value not a label value", md: map[string]string{"metric": "capscale-load-index", "source": "gpu load!", "targetValue": "1"}, wantKey: "labels", wantErr: "gpu load!"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTrigger(tc.md)
			if tc.wantKey != "" {
				var me *MetadataError
				if !errors.As(err, &me) || me.Key != tc.wantKey || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseTrigger = %+v, %v; want a MetadataError for %q containing %q", got, err, tc.wantKey, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseTrigger: %v", err)
			}
			if got.Metric != tc.md["metric"] || got.Selector.String() != tc.wantSelector || got.Target != tc.wantTarget || got.Activation != tc.wantActivation {
				t.Errorf("ParseTrigger = {%s %q %v %v}, want {%s %q %v %v}", got.Metric, got.Selector, got.Target, got.Activation,
					tc.md["metric"], tc.wantSelector, tc.wantTarget, tc.wantActivation)
			}
		})
	}
}

// FuzzParseTrigger: metadata comes from any ScaledObject; no input panics,
// and an accepted trigger has a usable target.
func FuzzParseTrigger(f *testing.F) {
	f.Add("capscale-load-index", "gpu", "", "", "0.7", "")
	f.Add("capscale-desired-replicas", "", "web", "qps", "", "1")
	f.Fuzz(func(t *testing.T, metric, src, workload, policy, target, activation string) {
		md := map[string]string{"metric": metric, "source": src, "workload": workload, "policy": policy, "targetValue": target, "activationThreshold": activation}
		for k, v := range md {
			if v == "" && k != "metric" {
				delete(md, k)
			}
		}
		tr, err := ParseTrigger(md)
		if err != nil {
			return
		}
		if !(tr.Target > 0) || tr.Activation < 0 || tr.Selector == nil {
			t.Errorf("accepted %v as %+v", md, tr)
		}
	})
}
