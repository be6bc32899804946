// Package apiservice decides whether capscale may claim the external-metrics
// APIService. Only one server can own v1beta1.external.metrics.k8s.io, and
// taking it from another adapter (KEDA, prometheus-adapter) silently breaks
// every HPA that relies on that adapter's metrics.
package apiservice

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregv1client "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset/typed/apiregistration/v1"
)

// Name is the APIService capscale serves.
const Name = "v1beta1.external.metrics.k8s.io"

// Service is the Service an APIService routes to.
type Service struct{ Namespace, Name string }

func (s Service) String() string { return s.Namespace + "/" + s.Name }

// Decision is the outcome of Check.
type Decision string

const (
	// Absent: nobody serves the API yet.
	Absent Decision = "absent"
	// Ours: the APIService already points at capscale.
	Ours Decision = "ours"
	// Replace: another server owns it and the caller asked to take it over.
	Replace Decision = "replace"
)

// RefusedError says who owns the APIService and how to take it over.
type RefusedError struct {
	Current string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("APIService %s is served by %s, not capscale: installing capscale would take external metrics away from it "+
		"and from every HorizontalPodAutoscaler that uses them (KEDA ScaledObjects, prometheus-adapter rules). "+
		"Remove that adapter first, or re-run with --replace to take the APIService over", Name, e.Current)
}

// Check reads the APIService and decides whether capscale (served by want)
// may install it. Another owner is refused unless replace is set.
func Check(ctx context.Context, c apiregv1client.APIServicesGetter, want Service, replace bool) (Decision, string, error) {
	got, err := c.APIServices().Get(ctx, Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Absent, "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("reading APIService %s: %w", Name, err)
	}
	current := "kube-apiserver itself (a local APIService)"
	if s := got.Spec.Service; s != nil {
		if (Service{Namespace: s.Namespace, Name: s.Name}) == want {
			return Ours, want.String(), nil
		}
		current = "Service " + Service{Namespace: s.Namespace, Name: s.Name}.String()
	}
	if !replace {
		return "", current, &RefusedError{Current: current}
	}
	return Replace, current, nil
}
