package kedascaler

import (
	"time"

	pb "github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/utils/clock"
)

// streamOptions bound StreamIsActive.
type streamOptions struct {
	clock clock.WithTicker
	// interval is how often an open stream re-evaluates its trigger; a
	// message is sent only when the answer changes.
	interval time.Duration
	// slots holds one token per open stream; its capacity is the most
	// streams served at once.
	slots chan struct{}
	// done closes when the server shuts down: GracefulStop waits for
	// every stream, and a stream never ends on its own.
	done <-chan struct{}
}

// StreamIsActive pushes IsActive's answer when it changes: the first one at
// once, then at most one per interval. It ends with the stream's context,
// on shutdown (Unavailable, so KEDA reconnects to another replica), or with
// the error that a read gives (a stale source is Unavailable, never false).
func (s *Scaler) StreamIsActive(ref *pb.ScaledObjectRef, stream pb.ExternalScaler_StreamIsActiveServer) error {
	select {
	case s.streams.slots <- struct{}{}:
		defer func() { <-s.streams.slots }()
	default:
		return status.Errorf(codes.ResourceExhausted, "%d StreamIsActive streams are open, the most this adapter serves (--keda-scaler-max-streams)", cap(s.streams.slots))
	}
	ctx := stream.Context()
	ticker := s.streams.clock.NewTicker(s.streams.interval)
	defer ticker.Stop()
	sent, last := false, false
	for {
		r, err := s.read(ctx, ref)
		if err != nil {
			return err
		}
		if a := r.active(); !sent || a != last {
			if err := stream.Send(&pb.IsActiveResponse{Result: a}); err != nil {
				return err
			}
			sent, last = true, a
		}
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-s.streams.done:
			return status.Error(codes.Unavailable, "the adapter is shutting down")
		case <-ticker.C():
		}
	}
}
