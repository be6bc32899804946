package wire

import (
	"bytes"
	"testing"

	"github.com/capscale/capscale/extender"
)

// answer runs one filter or prioritize call the way the handler does, with
// sc's buffers, and returns the bytes it would send.
func answer(t *testing.T, l *extender.Ledger, verb string, data []byte, sc *Scratch) string {
	t.Helper()
	body := sc.bodyBuf(int64(len(data)))
	copy(body, data)
	args, err := decodeExtenderArgs(body, sc)
	if err != nil {
		t.Fatal(err)
	}
	out := sc.response()
	switch verb {
	case "filter":
		_, err = verbsOf(l).filter(args, sc).WriteTo(out)
	default:
		names, scores := verbsOf(l).prioritize(args, sc)
		at := func(i int) (string, int64) { return names[i], scores[i] }
		_, err = writeScores(out, sc, len(names), at, args.NodeNames != nil && args.plainNames)
	}
	if err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// TestScratchReuse runs calls of every shape and size through one Scratch,
// reset between calls as Release does, and checks each answer against the
// same call with buffers of its own: nothing of an earlier call leaks into
// a later one.
func TestScratchReuse(t *testing.T) {
	l := fuzzLedger()
	many := make([]string, 300)
	for i := range many {
		many[i] = []string{"a", "b", "c", "ghost"}[i%4]
	}
	calls := []*Args{
		namesArgs(pod("p", "", 1), many...),
		namesArgs(pod("p", "", 1), "a"),
		namesArgs(pod("p", "", 2), "b", "c"),
		namesArgs(pod("p", "", 1), "a", "<b>", "ghost"),
		nodesArgs(pod("p", "", 2), node("a", ""), node("late", "4"), node("bad", "-1")),
		namesArgs(pod("p", "", 0), "a", "b"),
		{Pod: pod("p", "", 1), NodeNames: &[]string{}},
		namesArgs(pod("p", "", 1), many[:7]...),
	}
	sc := new(Scratch)
	for round := range 2 {
		for i, args := range calls {
			data := mustJSON(t, args)
			for _, verb := range []string{"filter", "prioritize"} {
				want := answer(t, l, verb, data, new(Scratch))
				got := answer(t, l, verb, data, sc)
				if got != want {
					t.Errorf("round %d call %d %s with a reused Scratch:\n got %s\nwant %s", round, i, verb, got, want)
				}
				sc.reset()
			}
		}
	}
}

// TestScratchBounds checks what reset keeps: buffers up to a cluster's
// worth, emptied of strings; nothing a huge body grew.
func TestScratchBounds(t *testing.T) {
	sc := new(Scratch)
	sc.names = append(sc.names, "a", "b")
	sc.usages = append(sc.usages, extender.NodeUsage{CapacityError: "bad"})
	sc.failed = append(sc.failed, failedNode{name: "c", reason: "full"})
	sc.reset()
	if len(sc.names) != 0 || cap(sc.names) == 0 {
		t.Fatalf("names len %d cap %d: want an empty buffer kept", len(sc.names), cap(sc.names))
	}
	for i, s := range sc.names[:2] {
		if s != "" {
			t.Errorf("names[%d] = %q after reset: the pool would pin a request", i, s)
		}
	}
	if u := sc.usages[:1][0]; u.CapacityError != "" {
		t.Errorf("usage kept the reason %q after reset", u.CapacityError)
	}
	if f := sc.failed[:1][0]; f.name != "" || f.reason != "" {
		t.Errorf("failed node kept %+v after reset", f)
	}

	huge := sc.bodyBuf(maxPooledBody + 1)
	if len(huge) != maxPooledBody+1 || cap(sc.body) > maxPooledBody {
		t.Fatalf("a body past %d bytes went into the scratch (cap %d)", maxPooledBody, cap(sc.body))
	}
	sc.scores = make([]int64, maxPooledLen+1)
	sc.resp.Grow(maxPooledBody + 1)
	sc.w.buf = make([]byte, 0, maxPooledBody+1)
	sc.reset()
	if sc.scores != nil || sc.resp.Cap() > maxPooledBody || sc.w.buf != nil {
		t.Errorf("reset kept oversized buffers: scores cap %d, response cap %d, writer cap %d",
			cap(sc.scores), sc.resp.Cap(), cap(sc.w.buf))
	}
}

// TestScratchNilAllocates: the buffers that paths without a Scratch share
// are allocated on a nil one.
func TestScratchNilAllocates(t *testing.T) {
	var sc *Scratch
	if b := sc.bodyBuf(5); len(b) != 5 {
		t.Fatalf("bodyBuf(5) = %d bytes", len(b))
	}
	var buf bytes.Buffer
	w := sc.writer(&buf)
	w.str("ok")
	w.flush()
	if buf.String() != "ok" {
		t.Fatalf("writer wrote %q", buf.String())
	}
	sc.Release()
}
