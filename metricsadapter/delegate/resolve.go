package delegate

import (
	"fmt"
	"net"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Endpoints returns host:port of every ready endpoint behind port of svc,
// the way kube-apiserver's aggregator resolves an APIService's Service with
// --enable-aggregator-routing: the Service port is matched by number, the
// EndpointSlice port by that port's name, and an endpoint's first address
// is dialled. It works without kube-proxy and cluster DNS in the path.
func Endpoints(svc *corev1.Service, slices []*discoveryv1.EndpointSlice, port int32) ([]string, error) {
	if svc == nil {
		return nil, fmt.Errorf("the Service does not exist")
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil, fmt.Errorf("the Service %s/%s is of type ExternalName, which has no endpoints", svc.Namespace, svc.Name)
	}
	var portName string
	found := false
	for _, p := range svc.Spec.Ports {
		if p.Port == port {
			portName, found = p.Name, true
			break
		}
	}
	if !found {
		return nil, fmt.Errorf("the Service %s/%s has no port %d", svc.Namespace, svc.Name, port)
	}
	var out []string
	for _, s := range slices {
		target := int32(-1)
		for _, p := range s.Ports {
			name := ""
			if p.Name != nil {
				name = *p.Name
			}
			if name == portName && p.Port != nil && (p.Protocol == nil || *p.Protocol == corev1.ProtocolTCP) {
				target = *p.Port
				break
			}
		}
		if target < 0 {
			continue
		}
		for _, e := range s.Endpoints {
			if len(e.Addresses) == 0 || (e.Conditions.Ready != nil && !*e.Conditions.Ready) {
				continue
			}
			out = append(out, net.JoinHostPort(e.Addresses[0], strconv.Itoa(int(target))))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the Service %s/%s has no ready endpoint for port %d", svc.Namespace, svc.Name, port)
	}
	sort.Strings(out)
	return out, nil
}
