// Command web is the image the end-to-end tests run on real nodes
// (REAL_NODE_IMAGE): an HTTP server that answers on every address of its
// pod with the pod's name and the address it was reached on, and that
// records SIGTERM, so that a test can tell a container was stopped
// gracefully and not killed.
//
// Environment: PORT (default 8080); POD_NAME (default the hostname, which
// is the pod's name); RECORD_DIR, a directory (a hostPath volume) where it
// appends "start", "sigterm" and "exit" lines with a timestamp to a file
// named after the pod; TERM_DELAY, how long it keeps serving after SIGTERM
// before it exits (default 0), to show that the kubelet waited.
//
// It is also a load index for capscale's metrics adapter: GET /load
// answers {"load": X}, PUT /load?value=X sets X (a finite number >= 0;
// LOAD sets the first, default 0).
package main

import (
	"context"
	"fmt"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

func main() {
	name := os.Getenv("POD_NAME")
	if name == "" {
		name, _ = os.Hostname()
	}
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	var delay time.Duration
	if s := os.Getenv("TERM_DELAY"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			log.Fatalf("TERM_DELAY %q: %v", s, err)
		}
		delay = d
	}
	// Listen before anything else: the kubelet calls the container
	// Running as soon as it started, and a test may connect right then.
	ln, err := net.Listen("tcp", ":"+port)
	if err != nil {
		log.Fatalf("listening on :%s: %v", port, err)
	}
	rec := recorder{dir: os.Getenv("RECORD_DIR"), name: name}
	rec.write("start")

	load, err := parseLoad(os.Getenv("LOAD"))
	if err != nil {
		log.Fatalf("LOAD: %v", err)
	}
	var li loadIndex
	li.set(load)
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		fmt.Fprintf(w, "pod=%s addr=%v\n", name, local)
	})
	mux.HandleFunc("GET /load", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"load": %s}`+"\n", strconv.FormatFloat(li.get(), 'g', -1, 64))
	})
	mux.HandleFunc("PUT /load", func(w http.ResponseWriter, r *http.Request) {
		v, err := parseLoad(r.URL.Query().Get("value"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		li.set(v)
		log.Printf("load set to %v", v)
	})
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: mux}
	go func() {
		if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
			log.Fatalf("serving on :%s: %v", port, err)
		}
	}()
	log.Printf("pod %s serving on :%s", name, port)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	s := <-sig
	log.Printf("received %v; serving %v more, then exiting", s, delay)
	if s == syscall.SIGTERM {
		rec.write("sigterm")
	} else {
		rec.write("sigint")
	}
	time.Sleep(delay)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
	rec.write("exit")
	log.Printf("exiting")
}

// recorder appends "<event> <RFC 3339 time>" lines to RECORD_DIR/<pod>,
// synced, so that the line is on the host's disk before the process goes.
type recorder struct{ dir, name string }

func (r recorder) write(event string) {
	if r.dir == "" {
		return
	}
	f, err := os.OpenFile(filepath.Join(r.dir, r.name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		log.Printf("recording %s: %v", event, err)
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s %s\n", event, time.Now().UTC().Format(time.RFC3339Nano))
	if err := f.Sync(); err != nil {
		log.Printf("recording %s: %v", event, err)
	}
}

// loadIndex is the load GET /load answers.
type loadIndex struct {
	mu sync.Mutex
	v  float64
}

func (l *loadIndex) get() float64  { l.mu.Lock(); defer l.mu.Unlock(); return l.v }
func (l *loadIndex) set(v float64) { l.mu.Lock(); defer l.mu.Unlock(); l.v = v }

// parseLoad reads a load: empty is 0; otherwise a finite number >= 0.
func parseLoad(s string) (float64, error) {
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, fmt.Errorf("the load must be a finite number >= 0, got %q", s)
	}
	return v, nil
}
