package nodeplugin

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"

	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/capscale/capscale/internal/httpserver"
)

// registration follows the kubelet's answer to the plugin's registration,
// and is the plugin's readiness: the device publisher publishes a node's
// free devices only while the plugin's pod there is Ready
// (extender/devices/served.go), so Ready must mean that the kubelet will
// call the plugin.
type registration struct {
	registered atomic.Bool
	// stopping: Run is ending; no longer Ready, whatever the kubelet said.
	stopping atomic.Bool
	// refused ends Run.
	refused func(error)
}

// intercept sees every gRPC call of the plugin's two servers; the one that
// matters is the kubelet's NotifyRegistrationStatus, its answer to the
// registration (the plugin's only sign that the kubelet will call it; the
// kubelet logs nothing of it at --v=1).
func (r *registration) intercept(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	st, ok := req.(*registerapi.RegistrationStatus)
	if !ok {
		return resp, err
	}
	if st.PluginRegistered {
		r.registered.Store(true)
		klog.InfoS("Registered with the kubelet", "driver", Driver)
		return resp, err
	}
	r.registered.Store(false)
	klog.ErrorS(nil, "The kubelet refused the registration", "driver", Driver, "reason", st.Error)
	// Exit, and let the kubelet restart the container: the refusal shows
	// as restarts and in the previous container's log, where a plugin
	// that stayed up would only be not Ready; and a new container
	// registers afresh.
	r.refused(fmt.Errorf("the kubelet refused the registration of %s: %s", Driver, st.Error))
	return resp, err
}

// ready reports whether the kubelet registered the plugin and it is not
// stopping.
func (r *registration) ready() bool { return r.registered.Load() && !r.stopping.Load() }

// ServeHTTP serves /readyz for the kubelet's readiness probe.
func (r *registration) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/readyz" || (req.Method != http.MethodGet && req.Method != http.MethodHead) {
		httpserver.WriteError(w, http.StatusNotFound, "only GET /readyz is served here")
		return
	}
	if !r.ready() {
		http.Error(w, "not registered with the kubelet", http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}
