package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
)

// RestartedAtAnnotation is the pod template annotation `kubectl rollout
// restart` sets; changing it rolls the pods.
const RestartedAtAnnotation = "kubectl.kubernetes.io/restartedAt"

// Restarted is the outcome of a restart.
type Restarted struct {
	Namespace   string `json:"namespace"`
	Resource    string `json:"resource"`
	Name        string `json:"name"`
	RestartedAt string `json:"restartedAt"`
	// Generation is the object's generation after the restart; the rollout
	// is done when status.observedGeneration reaches it and Rollout says
	// complete.
	Generation int64 `json:"generation"`
}

// Stamper hands out restart stamps (RFC3339Nano) strictly later than any
// it handed out before, so that two restarts in the same second, or on a
// clock that did not move, still change the template.
type Stamper struct {
	Clock clock.PassiveClock
	mu    sync.Mutex
	last  time.Time
}

// Next returns the next stamp.
func (s *Stamper) Next() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.Clock
	if c == nil {
		c = clock.RealClock{}
	}
	t := c.Now().UTC()
	if !t.After(s.last) {
		t = s.last.Add(time.Nanosecond)
	}
	s.last = t
	return t.Format(time.RFC3339Nano)
}

// Restart rolls t's pods with c by stamping its pod template, as `kubectl
// rollout restart` does. A paused Deployment is a *Refusal: it would not
// roll.
func Restart(ctx context.Context, c kubernetes.Interface, t Target, stamp string) (Restarted, error) {
	var gen int64
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		// Read fresh from the API server: the paused check and the patch must
		// see the same resourceVersion.
		o, err := t.Kind.Get(ctx, c, t.Namespace, t.Name)
		if err != nil {
			return err
		}
		if o.paused {
			return &Refusal{Reason: fmt.Sprintf("deployment %s/%s is paused; resume it (kubectl rollout resume) before restarting, a paused deployment would not roll", t.Namespace, t.Name)}
		}
		patch, err := restartPatch(o.Meta.ResourceVersion, stamp)
		if err != nil {
			return err
		}
		// The resourceVersion in the patch makes the API server refuse it
		// with a Conflict if the object changed since the read, e.g. if
		// someone paused it meanwhile.
		o, err = t.Kind.patch(ctx, c, t.Namespace, t.Name, types.StrategicMergePatchType, patch)
		if err != nil {
			return err
		}
		gen = o.Meta.Generation
		return nil
	})
	if err != nil {
		return Restarted{}, fmt.Errorf("restarting %s: %w", t, err)
	}
	return Restarted{Namespace: t.Namespace, Resource: t.Resource(), Name: t.Name, RestartedAt: stamp, Generation: gen}, nil
}

func restartPatch(resourceVersion, stamp string) ([]byte, error) {
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": resourceVersion},
		"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{
			"annotations": map[string]string{RestartedAtAnnotation: stamp},
		}}},
	})
}
