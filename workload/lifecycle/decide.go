package lifecycle

import (
	"fmt"
	"strconv"

	autoscalingv2 "k8s.io/api/autoscaling/v2"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/workload/capacity"
)

// The lifecycle decisions, as plain functions over plain values: the
// handlers read, call one of these, and write what it says.

// hpaBounds is what the decisions read of the workload's HPA.
type hpaBounds struct {
	name     string
	min, max int32
}

func boundsOf(h *autoscalingv2.HorizontalPodAutoscaler) *hpaBounds {
	if h == nil {
		return nil
	}
	return &hpaBounds{name: h.Name, min: ReplicasOf(h.Spec.MinReplicas), max: h.Spec.MaxReplicas}
}

// ReplicasOf is a replica count as the API defaults it.
func ReplicasOf(p *int32) int32 {
	if p == nil {
		return 1 // the API default
	}
	return *p
}

// stopRefusal says why a stop must not happen: an HPA with minReplicas 0
// keeps scaling at 0 replicas and would undo it at its next sync. Empty
// means go ahead.
func stopRefusal(h *hpaBounds, kind, name string) string {
	if h == nil || h.min != 0 {
		return ""
	}
	return fmt.Sprintf("HorizontalPodAutoscaler %s has minReplicas 0, so it stays active at 0 replicas and would scale %s %s back up; stop it by lowering the HPA's maxReplicas or deleting the HPA instead",
		h.name, kind, name)
}

// stopPlan is what a stop does.
type stopPlan struct {
	// already: nothing to write.
	already bool
	// remember is the annotation value to write with replicas 0.
	remember   string
	remembered *int32
	message    string
}

// decideStop plans a stop of a workload at current replicas with these
// annotations. It is idempotent: a second stop never overwrites what the
// first remembered with 0, nor invents a count.
func decideStop(current int32, annotations map[string]string, h *hpaBounds) stopPlan {
	var p stopPlan
	if current == 0 {
		p.already = true
		remembered, ok := annotations[names.ReplicasBeforeStopAnnotation]
		if n, err := strconv.ParseInt(remembered, 10, 32); ok && err == nil && n > 0 {
			n32 := int32(n)
			p.remembered = &n32
			p.message = fmt.Sprintf("already stopped; start will restore %d replicas", n)
		} else {
			p.message = "already at 0 replicas with no remembered count; start needs a replica count"
		}
	} else {
		// Remember the current count, even over a stale annotation left by a
		// start done outside this API: it is the count to restore.
		p.remember = strconv.Itoa(int(current))
		p.remembered = &current
		p.message = fmt.Sprintf("stopped; start will restore %d replicas", current)
	}
	if h != nil {
		p.message += fmt.Sprintf("; HorizontalPodAutoscaler %s sees 0 replicas and disables scaling (condition ScalingActive=False, reason ScalingDisabled) until start", h.name)
	}
	return p
}

// startInput is what a start decides from.
type startInput struct {
	current     int32
	annotations map[string]string
	// body is the count the caller asked for, if any.
	body       *int32
	hpa        *hpaBounds
	kind, name string
}

// startPlan is what a start does.
type startPlan struct {
	// write: set replicas and drop the remembered count.
	write     bool
	replicas  int32
	requested int32
	// source is "body", "annotation", "current" or "hpa".
	source         string
	capped         bool
	alreadyRunning bool
	message        string
}

// decideStart plans a start: the asked count, else the remembered one,
// else the HPA's floor; never above the HPA's max. A *Refusal means
// there is no count to start with.
func decideStart(in startInput) (startPlan, error) {
	var p startPlan
	remembered, hasMemory := in.annotations[names.ReplicasBeforeStopAnnotation]
	var n int32
	switch {
	case in.body != nil:
		n, p.source = *in.body, "body"
	case hasMemory:
		v, err := strconv.ParseInt(remembered, 10, 32)
		switch {
		case in.current > 0:
			// Started outside this API: the remembered count is stale and
			// the current one wins.
			n, p.source = in.current, "current"
		case err != nil || v < 1:
			return p, &Refusal{Reason: fmt.Sprintf("annotation %s=%q is not a replica count", names.ReplicasBeforeStopAnnotation, remembered), Remedy: RemedyReplicas}
		default:
			n, p.source = int32(v), "annotation"
		}
	case in.current > 0:
		p.alreadyRunning, p.source = true, "current"
		p.replicas, p.requested = in.current, in.current
		p.message = fmt.Sprintf("already running with %d replicas", in.current)
		return p, nil
	case in.hpa != nil:
		// Scaled to 0 outside this API while an HPA manages it: the HPA's
		// own floor is the count its owner asked for.
		n, p.source = max(in.hpa.min, 1), "hpa"
	default:
		return p, &Refusal{Reason: fmt.Sprintf("%s %s is at 0 replicas and no count was remembered (no %s annotation)", in.kind, in.name, names.ReplicasBeforeStopAnnotation), Remedy: RemedyReplicas}
	}
	p.requested = n
	if in.hpa != nil && n > in.hpa.max {
		n, p.capped = in.hpa.max, true
	}
	p.write, p.replicas = true, n
	p.alreadyRunning = n == in.current && !hasMemory
	p.message = fmt.Sprintf("started with %d replicas", n)
	if h := in.hpa; h != nil && !p.alreadyRunning {
		if p.capped {
			p.message += fmt.Sprintf(" instead of %d: HorizontalPodAutoscaler %s allows at most %d", p.requested, h.name, h.max)
		}
		if p.replicas < h.min {
			p.message += fmt.Sprintf("; HorizontalPodAutoscaler %s will raise it to its minReplicas %d", h.name, h.min)
		}
		p.message += fmt.Sprintf("; HorizontalPodAutoscaler %s resumes scaling (ScalingDisabled ends) and may move it within %d..%d", h.name, h.min, h.max)
	}
	return p, nil
}

// scaleRefusal says why a direct scale to n must not happen: an HPA would
// undo it at its next sync unless the caller asked to move its bounds.
// Empty means go ahead.
func scaleRefusal(h *hpaBounds, adjustHPA bool, kind, name string, n int32) string {
	if h == nil || adjustHPA {
		return ""
	}
	return fmt.Sprintf("%s %s is managed by HorizontalPodAutoscaler %s (replicas %d..%d), which would undo a direct scale to %d at its next sync",
		kind, name, h.name, h.min, h.max, n)
}

// hpaChange is how an HPA's bounds move to include a scale to n.
type hpaChange struct {
	changed  bool
	min, max int32
	// message is complete when !changed; otherwise it needs the bounds the
	// API server stored (movedMessage).
	message string
}

// decideHPABounds widens h's bounds to include n. At n = 0 they stay: the
// HPA disables itself at 0 replicas.
func decideHPABounds(h hpaBounds, n int32) hpaChange {
	c := hpaChange{min: h.min, max: h.max}
	switch {
	case n == 0:
		c.message = fmt.Sprintf("HorizontalPodAutoscaler %s left at %d..%d: at 0 replicas it disables scaling (ScalingDisabled) until the workload is scaled up again", h.name, h.min, h.max)
	case n > h.max:
		c.changed, c.max = true, n
	case n < h.min:
		c.changed, c.min = true, n
	default:
		c.message = fmt.Sprintf("HorizontalPodAutoscaler %s bounds %d..%d already include %d; it may move the workload away from it at its next sync", h.name, h.min, h.max, n)
	}
	return c
}

// movedMessage says how an HPA's bounds moved.
func movedMessage(before, after hpaBounds) string {
	return fmt.Sprintf("HorizontalPodAutoscaler %s bounds moved from %d..%d to %d..%d; it may move the workload within them at its next sync",
		before.name, before.min, before.max, after.min, after.max)
}

// capacityWarning says when a scale from previous to n asked for more
// replicas than fit; empty when they fit or capacity is unknown.
func capacityWarning(c *capacity.Result, previous, n int32) string {
	if c == nil {
		return ""
	}
	more := int64(n) - int64(previous)
	if more <= c.Replicas {
		return ""
	}
	limit := "limited by " + string(c.LimitingResource)
	if c.LimitingResource == "" {
		limit = "no node is eligible"
	}
	return fmt.Sprintf("scaled anyway: %d more replicas were asked but only %d fit (%s); %d will stay Pending until capacity frees up",
		more, c.Replicas, limit, more-c.Replicas)
}
