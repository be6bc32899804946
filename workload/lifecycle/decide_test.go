package lifecycle

import (
	"errors"
	"strings"
	"testing"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/workload/capacity"
)

func mem(v string) map[string]string { return map[string]string{names.ReplicasBeforeStopAnnotation: v} }

func TestDecideStop(t *testing.T) {
	h := &hpaBounds{name: "web", min: 1, max: 5}
	tests := []struct {
		name           string
		current        int32
		annotations    map[string]string
		hpa            *hpaBounds
		wantAlready    bool
		wantRemember   string
		wantRemembered int32 // 0: none
		wantMsg        string
	}{
		{name: "running", current: 3, wantRemember: "3", wantRemembered: 3, wantMsg: "stopped; start will restore 3"},
		{name: "running over a stale memory", current: 4, annotations: mem("2"), wantRemember: "4", wantRemembered: 4},
		{name: "second stop keeps the memory", current: 0, annotations: mem("3"), wantAlready: true, wantRemembered: 3, wantMsg: "already stopped"},
		{name: "at 0 with nothing remembered", current: 0, wantAlready: true, wantMsg: "no remembered count"},
		{name: "at 0 with a bad memory", current: 0, annotations: mem("x"), wantAlready: true, wantMsg: "no remembered count"},
		{name: "with an HPA", current: 2, hpa: h, wantRemember: "2", wantRemembered: 2, wantMsg: "ScalingDisabled"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := decideStop(tc.current, tc.annotations, tc.hpa)
			var got int32
			if p.remembered != nil {
				got = *p.remembered
			}
			if p.already != tc.wantAlready || p.remember != tc.wantRemember || got != tc.wantRemembered || !strings.Contains(p.message, tc.wantMsg) {
				t.Errorf("decideStop = %+v (remembered %d)", p, got)
			}
		})
	}
}

func TestStopRefusal(t *testing.T) {
	if msg := stopRefusal(&hpaBounds{name: "h", min: 0, max: 3}, "Deployment", "web"); !strings.Contains(msg, "minReplicas 0") {
		t.Errorf("minReplicas 0: %q, want a refusal", msg)
	}
	for _, h := range []*hpaBounds{nil, {name: "h", min: 1, max: 3}} {
		if msg := stopRefusal(h, "Deployment", "web"); msg != "" {
			t.Errorf("stopRefusal(%+v) = %q, want none", h, msg)
		}
	}
}

func TestDecideStart(t *testing.T) {
	i := func(v int32) *int32 { return &v }
	h := &hpaBounds{name: "h", min: 2, max: 4}
	tests := []struct {
		name         string
		in           startInput
		wantConflict bool
		want         startPlan // message compared by substring
	}{
		{name: "remembered", in: startInput{annotations: mem("3")}, want: startPlan{write: true, replicas: 3, requested: 3, source: "annotation", message: "started with 3"}},
		{name: "body wins", in: startInput{annotations: mem("3"), body: i(5)}, want: startPlan{write: true, replicas: 5, requested: 5, source: "body"}},
		{name: "started outside: current wins", in: startInput{current: 2, annotations: mem("3")}, want: startPlan{write: true, replicas: 2, requested: 2, source: "current"}},
		{name: "bad memory while running: current", in: startInput{current: 2, annotations: mem("x")}, want: startPlan{write: true, replicas: 2, requested: 2, source: "current"}},
		{name: "bad memory at 0", in: startInput{annotations: mem("0")}, wantConflict: true},
		{name: "already running", in: startInput{current: 2}, want: startPlan{replicas: 2, requested: 2, source: "current", alreadyRunning: true, message: "already running"}},
		{name: "nothing remembered", in: startInput{kind: "Deployment", name: "web"}, wantConflict: true},
		{name: "HPA floor", in: startInput{hpa: h}, want: startPlan{write: true, replicas: 2, requested: 2, source: "hpa", message: "resumes scaling"}},
		{name: "HPA floor of 0 starts 1", in: startInput{hpa: &hpaBounds{name: "h", min: 0, max: 4}}, want: startPlan{write: true, replicas: 1, requested: 1, source: "hpa"}},
		{name: "capped by the HPA max", in: startInput{annotations: mem("9"), hpa: h}, want: startPlan{write: true, replicas: 4, requested: 9, source: "annotation", capped: true, message: "instead of 9"}},
		{name: "below the HPA min says so", in: startInput{body: i(1), hpa: h}, want: startPlan{write: true, replicas: 1, requested: 1, source: "body", message: "raise it to its minReplicas 2"}},
		{name: "body equal to current is already running", in: startInput{current: 3, body: i(3)}, want: startPlan{write: true, replicas: 3, requested: 3, source: "body", alreadyRunning: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := decideStart(tc.in)
			var ce *Refusal
			if tc.wantConflict {
				if !errors.As(err, &ce) {
					t.Fatalf("decideStart = %+v, %v; want a conflict", p, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			msg := p.message
			p.message = ""
			want := tc.want
			wantMsg := want.message
			want.message = ""
			if p != want || !strings.Contains(msg, wantMsg) {
				t.Errorf("decideStart = %+v %q, want %+v containing %q", p, msg, want, wantMsg)
			}
		})
	}
}

func TestScaleRefusal(t *testing.T) {
	h := &hpaBounds{name: "h", min: 1, max: 4}
	if msg := scaleRefusal(h, false, "Deployment", "web", 6); !strings.Contains(msg, "would undo a direct scale to 6") {
		t.Errorf("HPA without adjustHPA: %q, want a refusal", msg)
	}
	if msg := scaleRefusal(h, true, "Deployment", "web", 6); msg != "" {
		t.Errorf("with adjustHPA: %q", msg)
	}
	if msg := scaleRefusal(nil, false, "Deployment", "web", 6); msg != "" {
		t.Errorf("without HPA: %q", msg)
	}
}

func TestDecideHPABounds(t *testing.T) {
	h := hpaBounds{name: "h", min: 2, max: 4}
	tests := []struct {
		n                int32
		changed          bool
		wantMin, wantMax int32
	}{
		{n: 0, wantMin: 2, wantMax: 4},
		{n: 3, wantMin: 2, wantMax: 4},
		{n: 6, changed: true, wantMin: 2, wantMax: 6},
		{n: 1, changed: true, wantMin: 1, wantMax: 4},
	}
	for _, tc := range tests {
		c := decideHPABounds(h, tc.n)
		if c.changed != tc.changed || c.min != tc.wantMin || c.max != tc.wantMax || (!c.changed && c.message == "") {
			t.Errorf("decideHPABounds(%d) = %+v", tc.n, c)
		}
	}
}

func TestCapacityWarning(t *testing.T) {
	c := &capacity.Result{Replicas: 2, LimitingResource: "cpu"}
	if msg := capacityWarning(c, 1, 5); !strings.Contains(msg, "only 2 fit (limited by cpu); 2 will stay Pending") {
		t.Errorf("over capacity: %q", msg)
	}
	if msg := capacityWarning(c, 1, 3); msg != "" {
		t.Errorf("fits: %q", msg)
	}
	if msg := capacityWarning(nil, 1, 30); msg != "" {
		t.Errorf("unknown capacity: %q", msg)
	}
	if msg := capacityWarning(&capacity.Result{}, 0, 1); !strings.Contains(msg, "no node is eligible") {
		t.Errorf("no node: %q", msg)
	}
}
