package schedplugin

import (
	v1 "k8s.io/api/core/v1"

	"github.com/capscale/capscale/internal/underlay"
)

// ipamReleased: a node's IPAM now reports fewer IPs in use than before, or
// stopped reporting (the capacity-source mirror updated the node's
// capscale.io/underlay-ip-source-used): IPs a deleted pod's sandbox held
// are back, and a pod that waited for them may fit. Nothing else marks that
// moment: the pod left the API earlier.
func ipamReleased(oldNode, newNode *v1.Node, rule underlay.Rule) bool {
	if oldNode == nil || newNode == nil {
		return false
	}
	before := rule.Capacity(oldNode.Annotations, oldNode.Labels)
	after := rule.Capacity(newNode.Annotations, newNode.Labels)
	if after.Invalid != "" || !before.IPAM.Reported {
		return false
	}
	return !after.IPAM.Reported || after.IPAM.Used < before.IPAM.Used
}
