package delegate

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestEndpoints(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "keda", Name: "m"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
		{Name: "metrics", Port: 8080}, {Name: "https", Port: 443},
	}}}
	slice := func(port string, target int32, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{Ports: []discoveryv1.EndpointPort{{Name: ptr.To(port), Port: ptr.To(target), Protocol: ptr.To(corev1.ProtocolTCP)}}, Endpoints: eps}
	}
	ep := func(addr string, ready *bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
	}
	tests := []struct {
		name    string
		svc     *corev1.Service
		slices  []*discoveryv1.EndpointSlice
		port    int32
		want    string
		wantErr string
	}{
		{name: "port by name, ready and unknown-ready endpoints", svc: svc, port: 443,
			slices: []*discoveryv1.EndpointSlice{slice("https", 6443, ep("10.0.0.2", ptr.To(true)), ep("10.0.0.1", nil), ep("10.0.0.3", ptr.To(false))), slice("metrics", 9090, ep("10.0.0.9", nil))},
			want:   "10.0.0.1:6443,10.0.0.2:6443"},
		{name: "IPv6", svc: svc, port: 443, slices: []*discoveryv1.EndpointSlice{slice("https", 6443, ep("fd00::1", nil))}, want: "[fd00::1]:6443"},
		{name: "no such service port", svc: svc, port: 6443, wantErr: "has no port 6443"},
		{name: "no ready endpoint", svc: svc, port: 443, slices: []*discoveryv1.EndpointSlice{slice("https", 6443, ep("10.0.0.3", ptr.To(false)))}, wantErr: "no ready endpoint"},
		{name: "no Service", port: 443, wantErr: "does not exist"},
		{name: "ExternalName", svc: &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName}}, port: 443, wantErr: "ExternalName"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Endpoints(tc.svc, tc.slices, tc.port)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Endpoints = %v, %v; want error %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || strings.Join(got, ",") != tc.want {
				t.Fatalf("Endpoints = %v, %v; want %s", got, err, tc.want)
			}
		})
	}
}
