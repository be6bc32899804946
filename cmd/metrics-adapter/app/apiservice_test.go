package app

import (
	"context"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggfake "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset/fake"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/servingcert"
	"github.com/capscale/capscale/metricsadapter/apiservice"
)

// TestAdapterDecidesTheAPIService (issue 50): the running adapter, not a
// render, decides about the external-metrics APIService. Unregistered, it
// registers it (with --register-apiservice), owned by the install's
// ClusterRole; another adapter's it leaves alone unless told to delegate;
// and one its own install gave back it never takes again.
func TestAdapterDecidesTheAPIService(t *testing.T) {
	const install = "uid-of-this-install"
	keda := func(mark string) *apiregv1.APIService {
		a := &apiregv1.APIService{
			ObjectMeta: metav1.ObjectMeta{Name: apiservice.Name, ResourceVersion: "1", Annotations: map[string]string{}},
			Spec: apiregv1.APIServiceSpec{Service: &apiregv1.ServiceReference{Namespace: "keda", Name: "keda-operator-metrics-apiserver", Port: ptr.To(int32(443))},
				Group: "external.metrics.k8s.io", Version: "v1beta1", CABundle: []byte("KEDA-CA"), GroupPriorityMinimum: 100, VersionPriority: 100},
		}
		if mark != "" {
			a.Annotations[names.ReleasedAnnotation] = mark
		}
		return a
	}
	for _, tc := range []struct {
		name               string
		existing           *apiregv1.APIService
		register, delegate bool
		// wantOurs: the APIService ends routed to capscale; wantAbsent: none.
		wantOurs, wantAbsent bool
	}{
		{name: "absent, registered", register: true, wantOurs: true},
		{name: "absent, not asked to register", wantAbsent: true},
		{name: "another adapter's", existing: keda(""), register: true},
		{name: "another adapter's, delegate", existing: keda(""), register: true, delegate: true, wantOurs: true},
		{name: "given back by this install", existing: keda(install), register: true, delegate: true},
		{name: "given back by another install", existing: keda("uid-of-an-old-install"), register: true, delegate: true, wantOurs: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := fake.NewClientset(&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: DefaultInstallationClusterRole, UID: types.UID(install)}})
			agg := aggfake.NewSimpleClientset()
			if tc.existing != nil {
				agg = aggfake.NewSimpleClientset(tc.existing)
			}
			o := defaultServingCertOptions()
			o.Secret, o.Register, o.DelegateOwner = "capscale-system/capscale-serving-cert", tc.register, tc.delegate
			if errs := o.Validate(); len(errs) > 0 {
				t.Fatal(errs)
			}
			m, err := o.manager(kube, agg, servingcert.NewMetrics())
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go m.Run(ctx)

			get := func() (*apiregv1.APIService, error) {
				return agg.ApiregistrationV1().APIServices().Get(ctx, apiservice.Name, metav1.GetOptions{})
			}
			ours := func(a *apiregv1.APIService) bool {
				return a.Spec.Service != nil && a.Spec.Service.Namespace == "capscale-system" && a.Spec.Service.Name == "capscale-metrics-adapter"
			}
			// Decided once the serving Secret is made (the same pass); a
			// negative case gets a moment more to go wrong.
			deadline := time.Now().Add(10 * time.Second)
			for {
				a, err := get()
				_, serr := kube.CoreV1().Secrets("capscale-system").Get(ctx, "capscale-serving-cert", metav1.GetOptions{})
				if tc.wantOurs && err == nil && ours(a) && len(a.Spec.CABundle) > 0 || !tc.wantOurs && serr == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("nothing decided: APIService %+v, %v; Secret %v", a, err, serr)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if !tc.wantOurs {
				time.Sleep(500 * time.Millisecond)
			}
			a, err := get()
			switch {
			case tc.wantAbsent:
				if !apierrors.IsNotFound(err) {
					t.Errorf("registered without --register-apiservice: %+v, %v", a, err)
				}
			case !tc.wantOurs:
				if err != nil || ours(a) || string(a.Spec.CABundle) != "KEDA-CA" {
					t.Errorf("another adapter's APIService was taken: %+v, %v", a, err)
				}
			case tc.existing == nil:
				if len(a.OwnerReferences) != 1 || a.OwnerReferences[0].Kind != "ClusterRole" || a.OwnerReferences[0].UID != install {
					t.Errorf("the registered APIService is not owned by the install's ClusterRole: %+v", a.OwnerReferences)
				}
			}
		})
	}
}
