// Command nullextender is the floor of kube-scheduler's extender protocol:
// the least any extender does for a pod. It answers /filter with the node
// names it was offered, copied from the request without decoding the pod,
// and /bind with one Binding POST; it runs no informers and counts nothing,
// so it over-commits nodes. `benche2e --extender-floor` runs it in the
// extender's place and reads its CPU per pod the same way as capscale's
// (BENCHMARKS.md, "The protocol's floor"). It is a measuring instrument for
// the rig, never a scheduler extender for a cluster.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/capscale/capscale/internal/kube"
)

// maxBody bounds a request body: ExtenderArgs with 5000 names is ~100 KiB.
const maxBody = 4 << 20

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "nullextender: %v\n", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("nullextender", flag.ContinueOnError)
	addr := fs.String("bind-address", "127.0.0.1:8888", "host:port to serve on; loopback only")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the identity that creates Bindings")
	qps := fs.Float64("kube-api-qps", 50, "queries per second to the apiserver")
	burst := fs.Int("kube-api-burst", 100, "burst of queries to the apiserver")
	maxProcs := fs.Int("max-procs", 1, "GOMAXPROCS, as the extender's --max-procs (0: Go's choice)")
	fs.Int("v", 0, "accepted for the rig's command line; nothing is logged")
	if err := fs.Parse(args); err != nil {
		return err
	}
	host, _, err := net.SplitHostPort(*addr)
	if err != nil || host != "127.0.0.1" {
		return fmt.Errorf("--bind-address must be 127.0.0.1:<port>, got %q", *addr)
	}
	if *maxProcs < 0 {
		return fmt.Errorf("--max-procs must not be negative, got %d", *maxProcs)
	}
	if *maxProcs > 0 {
		runtime.GOMAXPROCS(*maxProcs)
	}
	cfg, err := kube.RESTConfig(*kubeconfig, "nullextender")
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = float32(*qps), *burst
	cs, err := kube.Clientset(cfg)
	if err != nil {
		return err
	}
	return http.ListenAndServe(*addr, handler(cs))
}

func handler(cs kubernetes.Interface) http.Handler {
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") }
	mux.HandleFunc("GET /healthz", ok)
	mux.HandleFunc("GET /readyz", ok)
	mux.Handle("GET /metrics", promhttp.Handler())
	mux.HandleFunc("POST /filter", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		names, err := offeredNames(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		writeJSON(w, append(append([]byte(`{"NodeNames":`), names...), '}'))
	})
	mux.HandleFunc("POST /bind", func(w http.ResponseWriter, r *http.Request) {
		var args extenderv1.ExtenderBindingArgs
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&args); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var res extenderv1.ExtenderBindingResult
		err := cs.CoreV1().Pods(args.PodNamespace).Bind(r.Context(), &v1.Binding{
			ObjectMeta: metav1.ObjectMeta{Namespace: args.PodNamespace, Name: args.PodName, UID: args.PodUID},
			Target:     v1.ObjectReference{Kind: "Node", Name: args.Node},
		}, metav1.CreateOptions{})
		if err != nil {
			res.Error = err.Error()
		}
		out, _ := json.Marshal(res)
		writeJSON(w, out)
	})
	return mux
}

// offeredNames returns the raw JSON array of ExtenderArgs.NodeNames (the
// type has no JSON tags). It is the struct's last field, so the last match
// is the field even when a label of the pod has the same key; names are
// DNS subdomains, so the first ']' after it closes the array.
func offeredNames(body []byte) ([]byte, error) {
	key := []byte(`"NodeNames":`)
	i := bytes.LastIndex(body, key)
	if i < 0 {
		return nil, errors.New(`no "NodeNames" in the request: the null extender needs nodeCacheCapable: true`)
	}
	rest := body[i+len(key):]
	end := bytes.IndexByte(rest, ']')
	if len(rest) == 0 || rest[0] != '[' || end < 0 {
		return nil, errors.New(`"NodeNames" is not an array`)
	}
	return rest[:end+1], nil
}

// writeJSON answers with a Content-Length, so kube-scheduler's client keeps
// the connection (extender/wire/handler.go, writeSized).
func writeJSON(w http.ResponseWriter, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}
