package workload

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/capscale/capscale/internal/httpserver"
)

// RestartedAtAnnotation is the pod template annotation `kubectl rollout
// restart` sets; changing it rolls the pods.
const RestartedAtAnnotation = "kubectl.kubernetes.io/restartedAt"

// RestartResponse is the answer to a restart.
type RestartResponse struct {
	Namespace   string `json:"namespace"`
	Resource    string `json:"resource"`
	Name        string `json:"name"`
	RestartedAt string `json:"restartedAt"`
	// Generation is the object's generation after the restart; the rollout
	// is done when status.observedGeneration reaches it and GET .../rollout
	// says complete.
	Generation int64 `json:"generation"`
}

// restartStamp returns an RFC3339Nano time that is strictly later than any
// stamp this server handed out before, so that two restarts in the same
// second (or on a clock that did not move) still change the template.
func (s *Server) restartStamp() string {
	s.restartMu.Lock()
	defer s.restartMu.Unlock()
	t := s.clock.Now().UTC()
	if !t.After(s.lastRestart) {
		t = s.lastRestart.Add(time.Nanosecond)
	}
	s.lastRestart = t
	return t.Format(time.RFC3339Nano)
}

func (s *Server) restart(w http.ResponseWriter, r *http.Request, t target, c caller) {
	ctx := r.Context()
	stamp := s.restartStamp()
	var gen int64
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		// Read fresh from the API server: the paused check and the patch must
		// see the same resourceVersion.
		o, err := t.kind.get(ctx, c.client, t.namespace, t.name)
		if err != nil {
			return err
		}
		if o.paused {
			return &conflictError{fmt.Sprintf("deployment %s/%s is paused; resume it (kubectl rollout resume) before restarting, a paused deployment would not roll", t.namespace, t.name)}
		}
		patch, err := restartPatch(o.meta.ResourceVersion, stamp)
		if err != nil {
			return err
		}
		// The resourceVersion in the patch makes the API server refuse it
		// with a Conflict if the object changed since the read, e.g. if
		// someone paused it meanwhile.
		o, err = t.kind.patch(ctx, c.client, t.namespace, t.name, types.StrategicMergePatchType, patch)
		if err != nil {
			return err
		}
		gen = o.meta.Generation
		return nil
	})
	if err != nil {
		writeError(w, r, fmt.Sprintf("restarting %s %s/%s", t.resource(), t.namespace, t.name), err)
		return
	}
	klog.FromContext(ctx).V(2).Info("Restarted workload", "restartedAt", stamp)
	httpserver.WriteJSON(w, http.StatusAccepted, RestartResponse{
		Namespace: t.namespace, Resource: t.resource(), Name: t.name, RestartedAt: stamp, Generation: gen,
	})
}

func restartPatch(resourceVersion, stamp string) ([]byte, error) {
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": resourceVersion},
		"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{
			"annotations": map[string]string{RestartedAtAnnotation: stamp},
		}}},
	})
}
