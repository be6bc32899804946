package wire

import (
	"bytes"
	"io"
	"sync"

	"github.com/capscale/capscale/extender"
)

// Scratch owns every per-call buffer of one filter or prioritize call: the
// request body, the decoder's element list, the candidates' usages, the
// kept and rejected nodes, the scores and the response. The handler takes
// one from the pool and Releases it once the response is written; nothing
// the call returned may be used after that. At 5000 nodes a call's buffers
// are a few hundred kilobytes, and allocating them per call costs more in
// GC than the call itself.
//
// Calls take a buffer as s.names[:0] and store back what they grew. The
// body, writer and response also serve the paths that need no Scratch
// (bind, preempt, results built by hand): on a nil *Scratch they allocate.
type Scratch struct {
	body   []byte
	elems  []element
	usages []extender.NodeUsage
	// filtered holds extender.Filter's kept, rejected and cause lists.
	filtered extender.Filtered
	names    []string
	failed   []failedNode
	scores   []int64
	w        jsonWriter
	resp     bytes.Buffer
}

// maxPooledLen bounds the per-node slices kept for reuse: a cluster's
// worth of nodes, not whatever a hostile body once held.
const maxPooledLen = 1 << 16

// maxPooledBody bounds the byte buffers kept for reuse: names-only bodies
// (~40 bytes a node) and their answers, not the tens of megabytes of full
// Nodes.
const maxPooledBody = 1 << 20

// jsonWriterBuf is the size of the writer's buffer; pieces larger than
// that pass through it.
const jsonWriterBuf = 32 << 10

var scratchPool = sync.Pool{New: func() any { return new(Scratch) }}

// getScratch hands out the buffers of one call.
func getScratch() *Scratch { return scratchPool.Get().(*Scratch) }

// Release gives every buffer back at once.
func (s *Scratch) Release() {
	if s == nil {
		return
	}
	s.reset()
	scratchPool.Put(s)
}

// reset readies s for the next call. What a call grew past the bounds is
// dropped, and strings are cleared so that an idle pool pins no request.
func (s *Scratch) reset() {
	s.body = keepBytes(s.body)
	s.elems = keep(s.elems)
	s.usages = keep(s.usages)
	s.filtered = extender.Filtered{Kept: keep(s.filtered.Kept), Rejected: keep(s.filtered.Rejected), Causes: s.filtered.Causes[:0]}
	s.names = keep(s.names)
	s.failed = keep(s.failed)
	s.scores = keep(s.scores)
	s.w = jsonWriter{buf: keepBytes(s.w.buf)}
	if s.resp.Cap() > maxPooledBody {
		s.resp = bytes.Buffer{}
	}
	s.resp.Reset()
}

// keep empties a slice for the next call, or drops it if it grew too large.
func keep[T any](b []T) []T {
	if cap(b) > maxPooledLen {
		return nil
	}
	clear(b)
	return b[:0]
}

func keepBytes(b []byte) []byte {
	if cap(b) > maxPooledBody {
		return nil
	}
	return b[:0]
}

// bodyBuf returns a buffer of n bytes for the request body.
func (s *Scratch) bodyBuf(n int64) []byte {
	if s == nil || n > maxPooledBody {
		return make([]byte, n)
	}
	if int64(cap(s.body)) < n {
		s.body = make([]byte, n, max(n, 64<<10))
	}
	s.body = s.body[:n]
	return s.body
}

// writer returns the call's JSON writer onto w.
func (s *Scratch) writer(w io.Writer) *jsonWriter {
	if s == nil {
		return &jsonWriter{w: w, buf: make([]byte, 0, jsonWriterBuf)}
	}
	if cap(s.w.buf) < jsonWriterBuf {
		s.w.buf = make([]byte, 0, jsonWriterBuf)
	}
	s.w = jsonWriter{w: w, buf: s.w.buf[:0]}
	return &s.w
}

// response returns the call's empty in-memory response buffer.
func (s *Scratch) response() *bytes.Buffer {
	if s == nil {
		return new(bytes.Buffer)
	}
	s.resp.Reset()
	return &s.resp
}
