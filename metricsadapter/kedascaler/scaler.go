package kedascaler

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"

	pb "github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"
)

// Scaler implements KEDA's ExternalScalerServer over the adapter's
// external-metrics provider.
type Scaler struct {
	pb.UnimplementedExternalScalerServer

	provider cmprovider.ExternalMetricsProvider
	ready    func() bool
	streams  streamOptions
}

var _ pb.ExternalScalerServer = (*Scaler)(nil)

// reading is one evaluation of a trigger.
type reading struct {
	trigger Trigger
	value   float64
}

// read evaluates ref's trigger through the provider, exactly as a GET on
// external.metrics.k8s.io for the ScaledObject's namespace would.
func (s *Scaler) read(ctx context.Context, ref *pb.ScaledObjectRef) (reading, error) {
	if ref == nil {
		return reading{}, status.Error(codes.InvalidArgument, "missing ScaledObjectRef")
	}
	t, err := ParseTrigger(ref.GetScalerMetadata())
	if err != nil {
		return reading{}, status.Error(codes.InvalidArgument, scaledObject(ref)+": "+err.Error())
	}
	if ref.GetNamespace() == "" {
		return reading{}, status.Error(codes.InvalidArgument, scaledObject(ref)+": the ScaledObjectRef has no namespace")
	}
	if s.ready != nil && !s.ready() {
		return reading{}, status.Error(codes.Unavailable, "the adapter's informers have not synced yet")
	}
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("scaledObject", klog.KRef(ref.GetNamespace(), ref.GetName())))
	list, err := s.provider.GetExternalMetric(ctx, ref.GetNamespace(), t.Selector, cmprovider.ExternalMetricInfo{Metric: t.Metric})
	if err != nil {
		return reading{}, grpcError(ref, err)
	}
	// The provider answers exactly one item (an HPA sums them); anything
	// else is a bug, never a value.
	if len(list.Items) != 1 {
		return reading{}, status.Errorf(codes.Internal, "%s: metric %s answered %d items, want 1", scaledObject(ref), t.Metric, len(list.Items))
	}
	return reading{trigger: t, value: list.Items[0].Value.AsApproximateFloat64()}, nil
}

// IsActive is true while the metric is above the trigger's
// activationThreshold (0 by default: scale to zero only at 0).
func (s *Scaler) IsActive(ctx context.Context, ref *pb.ScaledObjectRef) (*pb.IsActiveResponse, error) {
	r, err := s.read(ctx, ref)
	if err != nil {
		return nil, err
	}
	return &pb.IsActiveResponse{Result: r.active()}, nil
}

func (r reading) active() bool { return r.value > r.trigger.Activation }

// GetMetricSpec names the trigger's metric and its target per replica. KEDA
// prefixes the name with the trigger's index (s0-...) in the HPA it builds
// and strips it again in GetMetrics.
func (s *Scaler) GetMetricSpec(_ context.Context, ref *pb.ScaledObjectRef) (*pb.GetMetricSpecResponse, error) {
	if ref == nil {
		return nil, status.Error(codes.InvalidArgument, "missing ScaledObjectRef")
	}
	t, err := ParseTrigger(ref.GetScalerMetadata())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, scaledObject(ref)+": "+err.Error())
	}
	return &pb.GetMetricSpecResponse{MetricSpecs: []*pb.MetricSpec{{
		MetricName:      t.Metric,
		TargetSize:      roundInt(t.Target),
		TargetSizeFloat: t.Target,
	}}}, nil
}

// GetMetrics answers the trigger's metric; any other name is NotFound.
func (s *Scaler) GetMetrics(ctx context.Context, req *pb.GetMetricsRequest) (*pb.GetMetricsResponse, error) {
	ref := req.GetScaledObjectRef()
	r, err := s.read(ctx, ref)
	if err != nil {
		return nil, err
	}
	if name := req.GetMetricName(); name != r.trigger.Metric {
		return nil, status.Errorf(codes.NotFound, "%s: metric %q is not this trigger's: GetMetricSpec names %q", scaledObject(ref), name, r.trigger.Metric)
	}
	// KEDA reads metricValueFloat when it is > 0 and the integer otherwise,
	// so both carry the value.
	return &pb.GetMetricsResponse{MetricValues: []*pb.MetricValue{{
		MetricName:       r.trigger.Metric,
		MetricValue:      roundInt(r.value),
		MetricValueFloat: r.value,
	}}}, nil
}

func roundInt(v float64) int64 {
	if v >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(math.Round(v))
}

func scaledObject(ref *pb.ScaledObjectRef) string {
	return fmt.Sprintf("ScaledObject %s/%s", ref.GetNamespace(), ref.GetName())
}

// grpcError turns the provider's Status error into the gRPC status with
// the same meaning and message: a stale source (503) is Unavailable, an
// unknown metric or workload (404) NotFound, bad labels (400)
// InvalidArgument. Never a value.
func grpcError(ref *pb.ScaledObjectRef, err error) error {
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		return status.Error(codes.Internal, scaledObject(ref)+": "+err.Error())
	}
	return status.Error(codeFor(se.Status().Code), scaledObject(ref)+": "+se.Status().Message)
}

func codeFor(httpCode int32) codes.Code {
	switch httpCode {
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return codes.InvalidArgument
	case http.StatusNotFound:
		return codes.NotFound
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusTooManyRequests:
		return codes.ResourceExhausted
	case http.StatusServiceUnavailable:
		return codes.Unavailable
	case http.StatusGatewayTimeout:
		return codes.DeadlineExceeded
	default:
		return codes.Internal
	}
}
