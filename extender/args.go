package extender

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	v1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// Args is the body of /filter and /prioritize: extenderv1.ExtenderArgs on the
// wire, but full Nodes are kept as the JSON the scheduler sent plus the two
// fields the extender reads. Decoding 5000 full Nodes into v1.Node objects
// and encoding the survivors again costs several times the CPU and memory.
type Args struct {
	// Pod is the pod being scheduled.
	Pod *v1.Pod
	// NodeNames are the candidates when kube-scheduler is nodeCacheCapable.
	NodeNames *[]string
	// Nodes are the candidates otherwise.
	Nodes *NodeItems
}

// NodeItems is the wire shape of a v1.NodeList as far as the extender needs it.
type NodeItems struct {
	Items []NodeItem `json:"items"`
}

// NodeItem is one full Node: its name and annotations, and its JSON as sent,
// returned verbatim when the node passes filter.
type NodeItem struct {
	Name        string
	Annotations map[string]string
	Raw         []byte
}

type nodeMeta struct {
	Metadata struct {
		Name        string            `json:"name"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
}

// UnmarshalJSON keeps a copy of the Node's JSON and reads its name and
// annotations.
func (n *NodeItem) UnmarshalJSON(data []byte) error {
	var m nodeMeta
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	n.Name, n.Annotations = m.Metadata.Name, m.Metadata.Annotations
	n.Raw = bytes.Clone(data)
	return nil
}

// MarshalJSON writes the Node as it was received.
func (n NodeItem) MarshalJSON() ([]byte, error) {
	if n.Raw != nil {
		return n.Raw, nil
	}
	var m nodeMeta
	m.Metadata.Name, m.Metadata.Annotations = n.Name, n.Annotations
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
}

// WriteTo writes r as JSON. Unlike json.Marshal it copies the Nodes' JSON
// as is instead of re-validating tens of megabytes that were validated when
// they were decoded.
func (r *FilterResult) WriteTo(w io.Writer) (int64, error) {
	bw := &countingWriter{w: w}
	bw.str(`{"Nodes":`)
	if r.Nodes == nil {
		bw.str("null")
	} else {
		bw.str(`{"items":[`)
		for i := range r.Nodes.Items {
			if i > 0 {
				bw.str(",")
			}
			raw, err := r.Nodes.Items[i].MarshalJSON()
			if err != nil {
				return bw.n, fmt.Errorf("encoding node %q: %w", r.Nodes.Items[i].Name, err)
			}
			bw.bytes(raw)
		}
		bw.str("]}")
	}
	for _, f := range []struct {
		key string
		v   any
	}{
		{`,"NodeNames":`, r.NodeNames},
		{`,"FailedNodes":`, r.FailedNodes},
		{`,"FailedAndUnresolvableNodes":`, r.FailedAndUnresolvableNodes},
		{`,"Error":`, r.Error},
	} {
		b, err := json.Marshal(f.v)
		if err != nil {
			return bw.n, fmt.Errorf("encoding %s: %w", f.key, err)
		}
		bw.str(f.key)
		bw.bytes(b)
	}
	bw.str("}\n")
	return bw.n, bw.err
}

// countingWriter remembers the first write error so that WriteTo can write
// without checking every call.
type countingWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countingWriter) bytes(b []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(b)
	c.n += int64(n)
	c.err = err
}

func (c *countingWriter) str(s string) {
	if c.err != nil {
		return
	}
	n, err := io.WriteString(c.w, s)
	c.n += int64(n)
	c.err = err
}

// DecodeExtenderArgs decodes and validates the body of /filter and
// /prioritize: Pod is required, and so is one of NodeNames
// (nodeCacheCapable) or Nodes. It gives what json.Unmarshal into Args gives,
// in one pass over data; the Nodes' Raw JSON aliases data, which the caller
// must then leave unchanged.
func DecodeExtenderArgs(data []byte) (*Args, error) {
	args, err := decodeExtenderArgsFast(data)
	if err != nil {
		return nil, fmt.Errorf("decoding ExtenderArgs: %w", err)
	}
	return validateArgs(args)
}

// decodeExtenderArgsStdlib is DecodeExtenderArgs with encoding/json: the
// reference the fast decoder is tested against.
func decodeExtenderArgsStdlib(data []byte) (*Args, error) {
	var args Args
	if err := json.Unmarshal(data, &args); err != nil {
		return nil, fmt.Errorf("decoding ExtenderArgs: %w", err)
	}
	return validateArgs(&args)
}

func validateArgs(args *Args) (*Args, error) {
	if args.Pod == nil {
		return nil, errors.New("ExtenderArgs.Pod is missing")
	}
	if args.NodeNames == nil && args.Nodes == nil {
		return nil, errors.New("ExtenderArgs needs NodeNames (nodeCacheCapable) or Nodes")
	}
	return args, nil
}

// count is the number of candidate nodes.
func (a *Args) count() int {
	if a.NodeNames != nil {
		return len(*a.NodeNames)
	}
	return len(a.Nodes.Items)
}
