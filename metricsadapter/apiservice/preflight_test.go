package apiservice

import (
	"context"
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset/fake"
)

var capscale = Service{Namespace: "capscale-system", Name: "capscale-metrics-adapter"}

func apiService(svc *apiregv1.ServiceReference) *apiregv1.APIService {
	return &apiregv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: Name}, Spec: apiregv1.APIServiceSpec{Service: svc}}
}

func TestCheck(t *testing.T) {
	keda := &apiregv1.ServiceReference{Namespace: "keda", Name: "keda-operator-metrics-apiserver"}
	tests := []struct {
		name     string
		existing []runtime.Object
		replace  bool
		want     Decision
		wantErr  string
	}{
		{name: "nobody serves it", want: Absent},
		{name: "already capscale", existing: []runtime.Object{apiService(&apiregv1.ServiceReference{Namespace: "capscale-system", Name: "capscale-metrics-adapter"})}, want: Ours},
		{name: "KEDA owns it", existing: []runtime.Object{apiService(keda)}, wantErr: "served by Service keda/keda-operator-metrics-apiserver"},
		{name: "KEDA owns it, replace asked", existing: []runtime.Object{apiService(keda)}, replace: true, want: Replace},
		{name: "same name in another namespace is not ours", existing: []runtime.Object{apiService(&apiregv1.ServiceReference{Namespace: "other", Name: "capscale-metrics-adapter"})}, wantErr: "other/capscale-metrics-adapter"},
		{name: "local APIService", existing: []runtime.Object{apiService(nil)}, wantErr: "kube-apiserver itself"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewSimpleClientset(tc.existing...)
			got, _, err := Check(context.Background(), c.ApiregistrationV1(), capscale, tc.replace)
			if tc.wantErr != "" {
				var refused *RefusedError
				if !errors.As(err, &refused) || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "--replace") {
					t.Fatalf("Check = %v, %v; want a refusal mentioning %q and --replace", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Check = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestCheckReportsReadErrors(t *testing.T) {
	c := fake.NewSimpleClientset()
	c.PrependReactor("get", "apiservices", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	if _, _, err := Check(context.Background(), c.ApiregistrationV1(), capscale, true); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Check = %v, want the read error even with replace", err)
	}
}
