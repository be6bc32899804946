package wire

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// Args is the body of /filter and /prioritize: extenderv1.ExtenderArgs on the
// wire, but full Nodes are kept as the JSON the scheduler sent plus the two
// fields the extender reads. Decoding 5000 full Nodes into v1.Node objects
// and encoding the survivors again costs several times the CPU and memory.
type Args struct {
	// Pod is the pod being scheduled, with only the fields podArgs reads.
	Pod *v1.Pod
	// NodeNames are the candidates when kube-scheduler is nodeCacheCapable.
	NodeNames *[]string
	// Nodes are the candidates otherwise.
	Nodes *NodeItems

	// plainNames is set by the decoder when every NodeNames element is a
	// plain string (see scanner.str): JSON-encoding one is quoting it.
	plainNames bool
}

// NodeItems is the wire shape of a v1.NodeList as far as the extender needs it.
type NodeItems struct {
	Items []NodeItem `json:"items"`
}

// NodeItem is one full Node: its name, annotations and labels (the
// capacity rule reads both), and its JSON as sent, returned verbatim when
// the node passes filter.
type NodeItem struct {
	Name        string
	Annotations map[string]string
	Labels      map[string]string
	Raw         []byte
}

// podArgs is what the verbs read of ExtenderArgs.Pod: who it is, its
// priority and what its containers request. kube-scheduler sends the whole
// Pod, managedFields and status included; decoding a v1.Pod was most of a
// names-only filter call's decoding and 12% of the extender's CPU under
// issue 17's rig, these fields 7%.
type podArgs struct {
	Metadata struct {
		Name      string    `json:"name"`
		Namespace string    `json:"namespace"`
		UID       types.UID `json:"uid"`
	} `json:"metadata"`
	Spec struct {
		Priority       *int32          `json:"priority"`
		Containers     []containerArgs `json:"containers"`
		InitContainers []containerArgs `json:"initContainers"`
		Overhead       v1.ResourceList `json:"overhead"`
	} `json:"spec"`
}

type containerArgs struct {
	Name          string                     `json:"name"`
	Resources     v1.ResourceRequirements    `json:"resources"`
	RestartPolicy *v1.ContainerRestartPolicy `json:"restartPolicy"`
}

// pod is p as a v1.Pod that carries only those fields; nil for nil.
func (p *podArgs) pod() *v1.Pod {
	if p == nil {
		return nil
	}
	out := &v1.Pod{}
	out.Name, out.Namespace, out.UID = p.Metadata.Name, p.Metadata.Namespace, p.Metadata.UID
	out.Spec.Priority, out.Spec.Overhead = p.Spec.Priority, p.Spec.Overhead
	out.Spec.Containers = containers(p.Spec.Containers)
	out.Spec.InitContainers = containers(p.Spec.InitContainers)
	return out
}

func containers(cs []containerArgs) []v1.Container {
	if cs == nil {
		return nil
	}
	out := make([]v1.Container, len(cs))
	for i, c := range cs {
		out[i] = v1.Container{Name: c.Name, Resources: c.Resources, RestartPolicy: c.RestartPolicy}
	}
	return out
}

type nodeMeta struct {
	Metadata struct {
		Name        string            `json:"name"`
		Annotations map[string]string `json:"annotations"`
		Labels      map[string]string `json:"labels"`
	} `json:"metadata"`
}

// UnmarshalJSON keeps a copy of the Node's JSON and reads its name,
// annotations and labels.
func (n *NodeItem) UnmarshalJSON(data []byte) error {
	var m nodeMeta
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	n.Name, n.Annotations, n.Labels = m.Metadata.Name, m.Metadata.Annotations, m.Metadata.Labels
	n.Raw = bytes.Clone(data)
	return nil
}

// MarshalJSON writes the Node as it was received.
func (n NodeItem) MarshalJSON() ([]byte, error) {
	if n.Raw != nil {
		return n.Raw, nil
	}
	var m nodeMeta
	m.Metadata.Name, m.Metadata.Annotations, m.Metadata.Labels = n.Name, n.Annotations, n.Labels
	return json.Marshal(m)
}

// FilterResult is extenderv1.ExtenderFilterResult with Nodes kept as sent;
// the JSON keys are the same.
type FilterResult struct {
	Nodes                      *NodeItems
	NodeNames                  *[]string
	FailedNodes                extenderv1.FailedNodesMap
	FailedAndUnresolvableNodes extenderv1.FailedNodesMap
	Error                      string

	// failed are rejected nodes not (yet) in the maps; WriteTo adds them.
	failed []failedNode
	// plainNames: every name in NodeNames and failed is a plain string.
	plainNames bool
	// scratch holds NodeNames and failed, and writes the result (nil:
	// allocated for this result alone).
	scratch *Scratch
}

// failedNode is one node filter rejected.
type failedNode struct {
	name, reason string
	unresolvable bool
}

// failedCounts counts the rejected nodes: failed, then unresolvable.
func (r *FilterResult) failedCounts() (int, int) {
	failed, unresolvable := len(r.FailedNodes), len(r.FailedAndUnresolvableNodes)
	for _, f := range r.failed {
		if f.unresolvable {
			unresolvable++
		} else {
			failed++
		}
	}
	return failed, unresolvable
}

// count is the number of candidate nodes.
func (a *Args) count() int {
	if a.NodeNames != nil {
		return len(*a.NodeNames)
	}
	return len(a.Nodes.Items)
}

// notPlain marks the bytes that make a JSON string other than plain: the
// quote, the backslash and the control characters JSON forbids, and the
// bytes encoding/json escapes or rewrites (<, >, &, non-ASCII). A plain
// string's JSON is its bytes between quotes, both ways: the decoder notes
// it, and the encoder then writes the name again without looking at it.
var notPlain = func() (t [256]bool) {
	for c := range 256 {
		t[c] = c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&'
	}
	return t
}()
