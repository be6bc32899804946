// Package publisher is native mode's capacity publisher: it keeps every
// Node's status.capacity and status.allocatable of capscale.io/underlay-ip
// equal to the underlay-IP rule (the capscale.io/underlay-ip-capacity
// annotation, else the label of that name, else the default), so that
// kube-scheduler's NodeResourcesFit, the kubelet's admission, Cluster
// Autoscaler and `kubectl describe node` count underlay IPs themselves.
//
// An invalid value means no room for a new pod, but publishing 0 under
// running pods would get them rejected when the kubelet restarts and
// re-admits every pod against allocatable. So an invalid node publishes the
// IPs in use there: free is 0 and what runs still fits.
//
// The decision is Decide, a plain function; Publisher is the controller
// around it (a node informer, a workqueue, one status patch per change).
package publisher

import (
	"encoding/json"
	"fmt"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// PublishedAnnotation records on a Node the capacity capscale published
// there. It marks the resource as capscale's: a node that advertises
// capscale.io/underlay-ip without it got the resource from someone else (a
// device plugin, a hand-written patch), and the publisher leaves it alone.
const PublishedAnnotation = names.UnderlayIPPublishedAnnotation

// Decision is what the publisher does for one node.
type Decision struct {
	// Patch is true when status (and the marker) must change to Want.
	Patch bool
	// Want is the capacity to publish: the rule's, or the IPs in use when
	// the node's value is invalid.
	Want int64
	// Invalid explains an invalid capacity annotation or label (Want is
	// then the IPs in use).
	Invalid string
	// Foreign explains why the node's resource is not capscale's to write.
	Foreign string
}

// Use is what a node's pods take from its pool, as the extender's ledger
// counts them.
type Use struct {
	// InUse is what the node's bound, non-terminal pods request.
	InUse int64
	// Drawn is what its pod-network pods that request nothing take when it
	// draws all.
	Drawn int64
	// Unlisted is what its pods with no IP yet charge (underlay.Listed):
	// bound before their CNI ADD, the IPAM cannot list them.
	Unlisted int64
}

// Decide compares a node with the rule. inUse is what the node's bound,
// non-terminal pods request, published instead of an invalid value so that
// no new pod fits and no running pod fails the kubelet's re-admission.
// drawn is what its pod-network pods that request nothing take when it
// draws all: kube-scheduler counts only requests, so they are left out of
// the capacity published (never below inUse, for the same re-admission).
// Likewise what the node's IPAM reports in use beyond the pods it can
// list (underlay.Beyond: the IPAM's report plus the unlisted pods, beyond
// the pods' charges) is published as less capacity, never below what the
// pods hold (withheld). A force-deleted pod's hold is not
// published: kube-scheduler drops the pod from its cache when the delete
// arrives, before a lower capacity can reach it, and the kubelet then
// refuses the pod it bound (OutOfcapscale.io/underlay-ip: Failed), which
// is worse than the sandbox retry; native mode holds such a pod with a
// finalizer instead (extender/release, docs/failure-and-recovery.md "When is an IP
// free again").
func Decide(node *v1.Node, rule underlay.Rule, u Use) Decision {
	inUse, drawn := u.InUse, u.Drawn
	c := rule.Capacity(node.Annotations, node.Labels)
	want := c.IPs
	pods := max(inUse, 0)
	if c.DrawsAll && drawn > 0 {
		want = max(c.IPs-drawn, inUse, 0)
		pods += drawn
	}
	want = withheld(want, c.IPAM, underlay.Charges{Pods: pods, Unlisted: max(u.Unlisted, 0)}, inUse)
	d := Decision{Want: want, Invalid: c.Invalid}
	if c.Invalid != "" {
		want = max(inUse, 0)
		d.Want = want
	}
	cur, has := node.Status.Capacity[underlay.Resource]
	_, marked := node.Annotations[PublishedAnnotation]
	// A node launched with the startup taint waits for capscale's
	// capacity, whatever its status says at creation (Karpenter's KWOK
	// provider copies the launching pods' requests there).
	if has && !marked && !HasStartupTaint(node) {
		d.Foreign = fmt.Sprintf("node advertises %s=%s, which capscale did not publish (a device plugin or another writer owns it); leaving it alone", names.UnderlayIPResource, cur.String())
		return d
	}
	alloc, hasAlloc := node.Status.Allocatable[underlay.Resource]
	d.Patch = !has || !hasAlloc || cur.Value() != want || alloc.Value() != want ||
		node.Annotations[PublishedAnnotation] != strconv.FormatInt(want, 10)
	// A node the mirror has not read, advertising nothing yet and holding
	// no pod's IP, already counts 0 to kube-scheduler and the kubelet: a
	// write of 0 there changes nothing, and on a fresh install it is one
	// Node write a node beside the mirror's first pass (issue 55 §6).
	if c.Unread && want == 0 && !has && !hasAlloc && !marked {
		d.Patch = false
	}
	return d
}

// Patch is the strategic-merge patch of nodes/status that publishes want.
// A node's status update also carries its metadata, so the marker and the
// resource change in one write; so do the capacity mirror's annotations
// when the publisher reads the sources itself (mirror: each set, or nil
// to remove; capacitysource.AnnotationChanges).
func Patch(want int64, mirror map[string]any) []byte {
	q := resource.NewQuantity(want, resource.DecimalSI).String()
	annotations := make(map[string]any, len(mirror)+1)
	for k, v := range mirror {
		annotations[k] = v
	}
	annotations[PublishedAnnotation] = strconv.FormatInt(want, 10)
	b, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": annotations},
		"status": map[string]any{
			"capacity":    map[string]string{names.UnderlayIPResource: q},
			"allocatable": map[string]string{names.UnderlayIPResource: q},
		},
	})
	return b
}

// MirrorPatch is the patch of nodes/status that writes only the mirror's
// annotations, for a node whose resource is not capscale's to publish.
func MirrorPatch(mirror map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": mirror}})
	return b
}

// DecideCharged is Decide for a node that does not draw all, under the
// rule whose default capacity is def: the IPAM's report beyond the pods'
// inUse is withheld from what is published.
func DecideCharged(node *v1.Node, def, inUse int64) Decision {
	return Decide(node, underlay.Rule{Default: def}, Use{InUse: inUse})
}

// withheld is the capacity to publish for want (a valid capacity less
// what its unasking pods draw): want less what the IPAM reports beyond
// the pods' charges ch, and never less than what the pods request,
// inUse (a kubelet re-admitting them checks allocatable). ch has no holds:
// see Decide.
func withheld(want int64, r underlay.IPAMReport, ch underlay.Charges, inUse int64) int64 {
	beyond := underlay.Beyond(ch, r)
	if beyond <= 0 {
		return want
	}
	return max(want-beyond, min(max(inUse, 0), want))
}

// StartupTaint is the taint a node autoscaler launches a node with until
// its capacity is published (names.UnderlayIPUnpublishedTaint).
const StartupTaint = names.UnderlayIPUnpublishedTaint

// HasStartupTaint reports whether node carries StartupTaint.
func HasStartupTaint(node *v1.Node) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == StartupTaint {
			return true
		}
	}
	return false
}

// ReleaseTaint reports whether the publisher removes node's startup taint
// once d is in its status: only when d publishes the rule's valid capacity.
// An invalid value (a capacity source not read yet among them) keeps it, so
// the autoscaler keeps counting the node as coming rather than as a node
// with no room.
func ReleaseTaint(node *v1.Node, d Decision) bool {
	return HasStartupTaint(node) && d.Invalid == "" && d.Foreign == ""
}

// WithoutStartupTaint is taints less StartupTaint, in order.
func WithoutStartupTaint(taints []v1.Taint) []v1.Taint {
	out := make([]v1.Taint, 0, len(taints))
	for _, t := range taints {
		if t.Key != StartupTaint {
			out = append(out, t)
		}
	}
	return out
}

// TaintPatch is the JSON patch that removes StartupTaint from a node whose
// taints are taints: its test fails (a conflict, retried) if another
// writer (the autoscaler's own registration) changed them meanwhile.
func TaintPatch(taints []v1.Taint) ([]byte, error) {
	return json.Marshal([]map[string]any{
		{"op": "test", "path": "/spec/taints", "value": taints},
		{"op": "replace", "path": "/spec/taints", "value": WithoutStartupTaint(taints)},
	})
}
