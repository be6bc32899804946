package wire

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
)

// The extender's JSON writer: results are written by hand, names that the
// decoder found plain are copied without another look, and Nodes go out as
// the bytes that came in.

// WriteTo writes r as JSON. Unlike json.Marshal it copies the Nodes' JSON
// as is instead of re-validating tens of megabytes that were validated when
// they were decoded, and writes names and reasons without reflection. The
// failed-node maps come out in map order, not sorted: JSON objects are
// unordered and kube-scheduler decodes them into maps.
func (r *FilterResult) WriteTo(w io.Writer) (int64, error) {
	bw := r.scratch.writer(w)
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

// writeScores writes n hosts and scores as a HostPriorityList with the
// writer of sc; plain says every host is a plain string (see scanner.str).
func writeScores(w io.Writer, sc *Scratch, n int, at func(i int) (string, int64), plain bool) (int64, error) {
	bw := sc.writer(w)
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
	for i+4 <= len(s) && !notPlain[s[i]] && !notPlain[s[i+1]] && !notPlain[s[i+2]] && !notPlain[s[i+3]] {
		i += 4
	}
	for ; i < len(s); i++ {
		if notPlain[s[i]] {
			b, _ := json.Marshal(s) // a string always encodes
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

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
