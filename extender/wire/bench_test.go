package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/capscale/capscale/extender"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// benchServer returns a handler over a ledger of n nodes, a third of them
// full, and the filter arguments for a pod needing one IP in both modes.
func benchServer(b *testing.B, n int) (http.Handler, *extenderv1.ExtenderArgs, *extenderv1.ExtenderArgs) {
	b.Helper()
	l := extender.NewLedger(extender.LedgerOptions{DefaultCapacity: 10})
	names := make([]string, n)
	list := &v1.NodeList{Items: make([]v1.Node, n)}
	for i := range n {
		list.Items[i] = realisticNode(i)
		names[i] = list.Items[i].Name
		l.SetNode(&list.Items[i])
		for j := range (i % 3) * 5 {
			l.SetPod(pod(fmt.Sprintf("p-%d-%d", i, j), names[i], 1))
		}
	}
	// The ledger as Run leaves it after its first tick: compacted.
	l.Expire()
	reg := prometheus.NewRegistry()
	h := NewHandler(HandlerOptions{Ledger: l, Registerer: reg, Gatherer: reg})
	p := pod("new", "", 1)
	return h, &extenderv1.ExtenderArgs{Pod: p, NodeNames: &names}, &extenderv1.ExtenderArgs{Pod: p, Nodes: list}
}

func benchVerb(b *testing.B, path string) {
	for _, n := range []int{500, 5000} {
		h, namesArgs, nodesArgs := benchServer(b, n)
		for _, mode := range []struct {
			name string
			args *extenderv1.ExtenderArgs
		}{{"NodeNames", namesArgs}, {"Nodes", nodesArgs}} {
			body := mustJSON(b, mode.args)
			b.Run(fmt.Sprintf("%s-%d", mode.name, n), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				// One response buffer for all iterations: a server streams
				// the response to the connection, it does not accumulate it.
				out := &bytes.Buffer{}
				for b.Loop() {
					out.Reset()
					rec := httptest.NewRecorder()
					rec.Body = out
					h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)))
					if rec.Code != http.StatusOK {
						b.Fatalf("%s: %d %s", path, rec.Code, rec.Body.String())
					}
				}
				b.ReportMetric(float64(len(body))/float64(n), "reqB/node")
			})
		}
	}
}

func BenchmarkFilter(b *testing.B)     { benchVerb(b, "/filter") }
func BenchmarkPrioritize(b *testing.B) { benchVerb(b, "/prioritize") }

// nodesBody is the /filter body of n realistic full Nodes.
func nodesBody(b *testing.B, n int) []byte {
	b.Helper()
	list := &v1.NodeList{Items: make([]v1.Node, n)}
	for i := range n {
		list.Items[i] = realisticNode(i)
	}
	return mustJSON(b, &extenderv1.ExtenderArgs{Pod: pod("new", "", 1), Nodes: list})
}

// BenchmarkDecodeNodesStdlib is the baseline of issue 7: the filter body of
// 5000 realistic full Nodes decoded into extenderv1.ExtenderArgs with
// encoding/json, as an extender using the upstream types would.
func BenchmarkDecodeNodesStdlib(b *testing.B) {
	body := nodesBody(b, 5000)
	b.Run("5000", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var args extenderv1.ExtenderArgs
			if err := json.Unmarshal(body, &args); err != nil || len(args.Nodes.Items) != 5000 {
				b.Fatalf("decoding: %v", err)
			}
		}
	})
}

// BenchmarkDecodeNodesFast decodes the same body with DecodeExtenderArgs.
func BenchmarkDecodeNodesFast(b *testing.B) {
	body := nodesBody(b, 5000)
	b.Run("5000", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			args, err := DecodeExtenderArgs(body)
			if err != nil || len(args.Nodes.Items) != 5000 {
				b.Fatalf("decoding: %v", err)
			}
		}
	})
}

// BenchmarkLedgerUsages is the ledger's share of a names-only call: one
// usage lookup per candidate under one read lock.
func BenchmarkLedgerUsages(b *testing.B) {
	_, namesArgs, _ := benchServer(b, 5000)
	l := extender.NewLedger(extender.LedgerOptions{DefaultCapacity: 10})
	for i := range 5000 {
		n := realisticNode(i)
		l.SetNode(&n)
	}
	l.Expire()
	names := *namesArgs.NodeNames
	// Names as the decoder makes them: one string per request.
	b.Run("5000", func(b *testing.B) {
		b.ReportAllocs()
		out := make([]extender.NodeUsage, 0, len(names))
		for b.Loop() {
			out = l.Usages("uid", names, out[:0])
		}
	})
}
