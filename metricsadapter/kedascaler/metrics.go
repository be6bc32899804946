package kedascaler

import (
	"context"
	"path"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// Metrics count and time the external-scaler calls.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	streams  prometheus.Gauge
}

// NewMetrics returns unregistered metrics.
func NewMetrics() *Metrics {
	return &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capscale_adapter_keda_requests_total",
			Help: "KEDA external-scaler gRPC calls by method and gRPC status code; a StreamIsActive stream counts when it ends.",
		}, []string{"method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "capscale_adapter_keda_request_duration_seconds",
			Help:    "Latency of KEDA external-scaler unary calls (IsActive, GetMetricSpec, GetMetrics).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"method"}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "capscale_adapter_keda_streams",
			Help: "Open StreamIsActive streams.",
		}),
	}
}

// Register adds the metrics to reg.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.streams} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// unary counts, times and logs each unary call. Only the service's
// registered methods reach it, so the method label is bounded.
func (m *Metrics) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := path.Base(info.FullMethod)
	start := time.Now()
	resp, err := handler(ctx, req)
	d := time.Since(start)
	code := status.Code(err)
	m.requests.WithLabelValues(method, code.String()).Inc()
	m.duration.WithLabelValues(method).Observe(d.Seconds())
	logCall(ctx, method, code.String(), d, err)
	return resp, err
}

// stream counts open streams and each stream's end.
func (m *Metrics) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	method := path.Base(info.FullMethod)
	m.streams.Inc()
	defer m.streams.Dec()
	start := time.Now()
	err := handler(srv, ss)
	code := status.Code(err)
	m.requests.WithLabelValues(method, code.String()).Inc()
	logCall(ss.Context(), method, code.String(), time.Since(start), err)
	return err
}

// logCall logs failures at V(1) (the provider already logs an unavailable
// source at V(0)) and successes at V(4): KEDA polls every ScaledObject.
func logCall(ctx context.Context, method, code string, d time.Duration, err error) {
	logger := klog.FromContext(ctx)
	if err != nil {
		logger.V(1).Info("KEDA scaler call failed", "method", method, "code", code, "duration", d, "err", status.Convert(err).Message())
		return
	}
	logger.V(4).Info("KEDA scaler call", "method", method, "duration", d)
}
