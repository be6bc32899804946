package apiservice

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	apiregv1client "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset/typed/apiregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/internal/names"
)

// Plan is a decided change to the APIService: Update is nil when nothing
// needs writing; Message says what was decided, for the operator.
type Plan struct {
	Update  *apiregv1.APIService
	Message string
	// Restored is true when Update gives the APIService back to the delegate.
	Restored bool
}

// DelegateOptions are the inputs of PlanDelegate.
type DelegateOptions struct {
	// Ours is capscale's adapter Service.
	Ours Service
	// DelegateCA verifies the current owner when its APIService has no
	// caBundle (insecureSkipTLSVerify); PEM.
	DelegateCA []byte
	// TakeOverCA, when set, also routes the APIService to Ours with this
	// caBundle in the same write (installs that do not apply the APIService
	// themselves: Helm with apiService.create=false).
	TakeOverCA []byte
	// Installation, when set, names the install of the adapter deciding
	// (Installation.ID: the UID of its ClusterRole). An APIService given back
	// (ReleasedAnnotation) by that same install, on its way out, is left
	// alone, however often its adapters restart; another install's mark
	// does not hold it. Empty (preflight, an operator's explicit command):
	// always decide.
	Installation string
}

// PlanDelegate decides how capscale records the current owner of api as its
// delegate (api nil: not registered). It never records capscale itself: when
// api already routes to Ours, an existing record is kept as it is.
func PlanDelegate(api *apiregv1.APIService, o DelegateOptions) (Plan, error) {
	if api == nil {
		return Plan{Message: fmt.Sprintf("ok: %s is not registered; there is no owner to delegate to, capscale may install it", Name)}, nil
	}
	svc := api.Spec.Service
	if svc == nil {
		return Plan{}, fmt.Errorf("APIService %s is served by kube-apiserver itself (a local APIService), which capscale cannot forward to", Name)
	}
	if (Service{Namespace: svc.Namespace, Name: svc.Name}) == o.Ours {
		rec, err := ParseRecord(api)
		switch {
		case err != nil:
			return Plan{}, err
		case rec == nil:
			return Plan{Message: fmt.Sprintf("ok: %s already routes to %s and no delegate is recorded", Name, o.Ours)}, nil
		default:
			return Plan{Message: fmt.Sprintf("ok: %s already routes to %s, which delegates to %s", Name, o.Ours, rec.Target())}, nil
		}
	}
	if released := api.Annotations[names.ReleasedAnnotation]; o.Installation != "" && released == o.Installation {
		return Plan{Message: fmt.Sprintf("ok: %s was given back to %s/%s by this install (%s), which is being removed; not taking it over again",
			Name, svc.Namespace, svc.Name, released)}, nil
	}
	rec := &Record{Spec: *api.Spec.DeepCopy()}
	if len(api.Spec.CABundle) == 0 {
		if len(o.DelegateCA) == 0 {
			return Plan{}, fmt.Errorf("APIService %s routes to %s/%s without a caBundle (insecureSkipTLSVerify), so capscale cannot verify it: "+
				"pass the CA that signed its serving certificate with --delegate-ca-file", Name, svc.Namespace, svc.Name)
		}
		rec.CABundle = o.DelegateCA
	}
	value, err := rec.annotation()
	if err != nil {
		return Plan{}, err
	}
	up := api.DeepCopy()
	if up.Annotations == nil {
		up.Annotations = map[string]string{}
	}
	up.Annotations[names.DelegateAnnotation] = value
	delete(up.Annotations, names.ReleasedAnnotation)
	msg := fmt.Sprintf("ok: recorded %s as the delegate of %s; capscale forwards every metric not named %s* to it", rec.Target(), Name, names.OwnMetricPrefix)
	if len(o.TakeOverCA) > 0 {
		up.Spec.Service = &apiregv1.ServiceReference{Namespace: o.Ours.Namespace, Name: o.Ours.Name, Port: ptr.To(int32(DefaultPort))}
		up.Spec.CABundle = o.TakeOverCA
		up.Spec.InsecureSkipTLSVerify = false
		msg += fmt.Sprintf(", and routed %s to %s", Name, o.Ours)
	}
	if isKEDA(api) {
		msg += fmt.Sprintf("\nwarning: %s/%s is KEDA's metrics server. KEDA's operator, with its certificate rotation on "+
			"(its chart's default), writes its CA into this APIService's caBundle and would write it over capscale's: "+
			"the aggregator then cannot verify capscale and every external metric fails. Run keda-operator with "+
			"--enable-apiservice-patching=false (it keeps rotating its own certificates) before capscale is installed in front of it",
			svc.Namespace, svc.Name)
	}
	return Plan{Update: up, Message: msg}, nil
}

// isKEDA reports whether api routes to KEDA's metrics server, as KEDA's
// chart and its config/ name and label it.
func isKEDA(api *apiregv1.APIService) bool {
	switch {
	case api.Labels["app.kubernetes.io/part-of"] == "keda-operator":
		return true
	case api.Spec.Service == nil:
		return false
	}
	n := api.Spec.Service.Name
	return n == "keda-operator-metrics-apiserver" || n == "keda-metrics-apiserver"
}

// PlanRestore decides how to give api back to its recorded delegate, marked
// given back by installation (so that the adapters of that install, still
// running and about to be removed, or restarting, do not take it over
// again; empty: no mark). Without a record there is nothing to restore;
// when api no longer routes to Ours, someone took it over since and it is
// left alone.
func PlanRestore(api *apiregv1.APIService, ours Service, installation string) (Plan, error) {
	if api == nil {
		return Plan{Message: fmt.Sprintf("ok: %s is not registered; nothing to restore", Name)}, nil
	}
	rec, err := ParseRecord(api)
	if err != nil {
		return Plan{}, err
	}
	if rec == nil {
		return Plan{Message: fmt.Sprintf("ok: %s has no recorded delegate; nothing to restore", Name)}, nil
	}
	if s := api.Spec.Service; s == nil || (Service{Namespace: s.Namespace, Name: s.Name}) != ours {
		return Plan{Message: fmt.Sprintf("ok: %s no longer routes to %s; leaving it as it is", Name, ours)}, nil
	}
	up := api.DeepCopy()
	up.Spec = *rec.Spec.DeepCopy()
	delete(up.Annotations, names.DelegateAnnotation)
	msg := fmt.Sprintf("restored: %s routes to %s again", Name, rec.Target())
	if installation != "" {
		up.Annotations[names.ReleasedAnnotation] = installation
		msg += fmt.Sprintf(", marked given back by install %s", installation)
	}
	return Plan{Update: up, Restored: true, Message: msg}, nil
}

// Apply reads the APIService, plans with plan and writes the result with
// optimistic concurrency (dryRun: server-side dry run).
func Apply(ctx context.Context, c apiregv1client.APIServicesGetter, dryRun bool, plan func(*apiregv1.APIService) (Plan, error)) (Plan, error) {
	got, err := c.APIServices().Get(ctx, Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		got, err = nil, nil
	}
	if err != nil {
		return Plan{}, fmt.Errorf("reading APIService %s: %w", Name, err)
	}
	p, err := plan(got)
	if err != nil || p.Update == nil {
		return p, err
	}
	opts := metav1.UpdateOptions{FieldManager: names.FieldManager}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if _, err := c.APIServices().Update(ctx, p.Update, opts); err != nil {
		if apierrors.IsConflict(err) {
			return Plan{}, errors.New("APIService " + Name + " changed while being updated; run the command again")
		}
		return Plan{}, fmt.Errorf("updating APIService %s: %w", Name, err)
	}
	return p, nil
}
