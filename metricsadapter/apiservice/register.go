package apiservice

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"k8s.io/utils/ptr"
)

// Registration is the APIService the adapter creates when none is
// registered (--register-apiservice): routed to ours with caBundle, the spec
// deploy/metrics-adapter/apiservice.yaml and the chart apply (a deploy/ test
// keeps them equal). owner, when set, is the install's ClusterRole, so that
// the garbage collector removes the APIService with the install that made
// it, however it was removed (helm uninstall, a GitOps prune, kubectl delete).
func Registration(ours Service, caBundle []byte, owner *metav1.OwnerReference) *apiregv1.APIService {
	api := &apiregv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: Name, Labels: map[string]string{"app.kubernetes.io/part-of": "capscale"}},
		Spec: apiregv1.APIServiceSpec{
			Service:              &apiregv1.ServiceReference{Namespace: ours.Namespace, Name: ours.Name, Port: ptr.To(int32(DefaultPort))},
			Group:                "external.metrics.k8s.io",
			Version:              "v1beta1",
			CABundle:             caBundle,
			GroupPriorityMinimum: 100,
			VersionPriority:      100,
		},
	}
	if owner != nil {
		api.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	return api
}
