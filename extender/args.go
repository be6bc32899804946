package extender

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"unicode/utf8"

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

	// plainNames is set by the decoder when every NodeNames element is a
	// plain string (see scanner.str): JSON-encoding one is quoting it.
	plainNames bool
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

	// failed are rejected nodes not (yet) in the maps; WriteTo adds them.
	failed []failedNode
	// plainNames: every name in NodeNames and failed is a plain string.
	plainNames bool
	// pooledNames is NodeNames when it came from namePool.
	pooledNames *[]string
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

// WriteTo writes r as JSON. Unlike json.Marshal it copies the Nodes' JSON
// as is instead of re-validating tens of megabytes that were validated when
// they were decoded, and writes names and reasons without reflection. The
// failed-node maps come out in map order, not sorted: JSON objects are
// unordered and kube-scheduler decodes them into maps.
func (r *FilterResult) WriteTo(w io.Writer) (int64, error) {
	bw := newJSONWriter(w)
	defer bw.release()
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
			bw.raw(raw)
		}
		bw.str("]}")
	}
	bw.str(`,"NodeNames":`)
	if r.NodeNames == nil || *r.NodeNames == nil {
		bw.str("null")
	} else {
		bw.str("[")
		for i, name := range *r.NodeNames {
			if i > 0 {
				bw.str(",")
			}
			bw.name(name, r.plainNames)
		}
		bw.str("]")
	}
	bw.str(`,"FailedNodes":`)
	bw.failedMap(r.FailedNodes, r.failed, false, r.plainNames)
	bw.str(`,"FailedAndUnresolvableNodes":`)
	bw.failedMap(r.FailedAndUnresolvableNodes, r.failed, true, r.plainNames)
	bw.str(`,"Error":`)
	bw.quote(r.Error)
	bw.str("}\n")
	bw.flush()
	return bw.n, bw.err
}

// writeHostPriorities writes list as json.Encoder would (newline included).
func writeHostPriorities(w io.Writer, list extenderv1.HostPriorityList) (int64, error) {
	if list == nil {
		n, err := io.WriteString(w, "null\n")
		return int64(n), err
	}
	return writeScores(w, len(list), func(i int) (string, int64) { return list[i].Host, list[i].Score }, false)
}

// writeScores writes n hosts and scores as a HostPriorityList; plain says
// every host is a plain string (see scanner.str).
func writeScores(w io.Writer, n int, at func(i int) (string, int64), plain bool) (int64, error) {
	bw := newJSONWriter(w)
	defer bw.release()
	bw.str("[")
	for i := range n {
		if i > 0 {
			bw.str(",")
		}
		host, score := at(i)
		bw.str(`{"Host":`)
		bw.name(host, plain)
		bw.str(`,"Score":`)
		bw.buf = strconv.AppendInt(bw.buf, score, 10)
		bw.str("}")
	}
	bw.str("]\n")
	bw.flush()
	return bw.n, bw.err
}

// jsonWriter buffers small pieces of JSON, passes large ones through, and
// remembers the first write error so that callers need not check each call.
type jsonWriter struct {
	w   io.Writer
	buf []byte
	n   int64
	err error
}

// writerBufs recycles the 32 KiB buffers of jsonWriter.
var writerBufs = sync.Pool{New: func() any {
	b := make([]byte, 0, 32<<10)
	return &b
}}

func newJSONWriter(w io.Writer) *jsonWriter {
	return &jsonWriter{w: w, buf: (*writerBufs.Get().(*[]byte))[:0]}
}

// release returns the buffer to writerBufs unless a huge string grew it.
func (j *jsonWriter) release() {
	if cap(j.buf) <= 1<<20 {
		b := j.buf[:0]
		writerBufs.Put(&b)
	}
	j.buf = nil
}

func (j *jsonWriter) str(s string) {
	j.buf = append(j.buf, s...)
	if len(j.buf) >= cap(j.buf)-1024 {
		j.flush()
	}
}

// raw writes b (a Node's JSON, typically kilobytes) without copying it.
func (j *jsonWriter) raw(b []byte) {
	j.flush()
	j.write(b)
}

func (j *jsonWriter) flush() {
	if len(j.buf) > 0 {
		j.write(j.buf)
		j.buf = j.buf[:0]
	}
}

func (j *jsonWriter) write(b []byte) {
	if j.err != nil {
		return
	}
	n, err := j.w.Write(b)
	j.n += int64(n)
	j.err = err
}

// quote writes s as a JSON string. Strings that encoding/json would escape
// (quotes, control characters, <, >, &, non-ASCII) go through it, so the
// output is the same.
func (j *jsonWriter) quote(s string) {
	j.buf = appendQuoted(j.buf, s)
	j.str("")
}

// appendQuoted appends s as a JSON string, the way encoding/json writes it.
func appendQuoted(dst []byte, s string) []byte {
	i := 0
	for i+4 <= len(s) && !quoteSpecial[s[i]] && !quoteSpecial[s[i+1]] && !quoteSpecial[s[i+2]] && !quoteSpecial[s[i+3]] {
		i += 4
	}
	for ; i < len(s); i++ {
		if quoteSpecial[s[i]] {
			b, _ := json.Marshal(s) // a string always encodes
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// quoteSpecial marks the bytes after which encoding/json writes a string
// differently from its bytes.
var quoteSpecial = func() (t [256]bool) {
	for c := range 256 {
		t[c] = c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&'
	}
	return t
}()

// name writes a string known to be plain without looking at it again.
func (j *jsonWriter) name(s string, plain bool) {
	if !plain {
		j.quote(s)
		return
	}
	j.buf = append(j.buf, '"')
	j.buf = append(j.buf, s...)
	j.buf = append(j.buf, '"')
	j.str("")
}

func (j *jsonWriter) failedMap(m map[string]string, failed []failedNode, unresolvable, plainNames bool) {
	n := len(m)
	for _, f := range failed {
		if f.unresolvable == unresolvable {
			n++
		}
	}
	if m == nil && n == 0 {
		j.str("null")
		return
	}
	j.str("{")
	first := true
	entry := func(k, v string) {
		if !first {
			j.str(",")
		}
		first = false
		j.quote(k)
		j.str(":")
		j.quote(v)
	}
	for k, v := range m {
		entry(k, v)
	}
	// Reasons repeat (see verdicts): quote each distinct one once.
	var reason string
	var quoted []byte
	for _, f := range failed {
		if f.unresolvable != unresolvable {
			continue
		}
		if !first {
			j.str(",")
		}
		first = false
		j.name(f.name, plainNames)
		j.str(":")
		if quoted == nil || f.reason != reason {
			quoted, reason = appendQuoted(quoted[:0], f.reason), f.reason
		}
		j.buf = append(j.buf, quoted...)
		j.str("")
	}
	j.str("}")
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
