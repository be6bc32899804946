// Package httpserver runs capscale's HTTP servers: sane timeouts, optional
// TLS, graceful shutdown when the context ends, per-request metrics and the
// JSON error shape every component returns.
package httpserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/klog/v2"

	"github.com/capscale/capscale/internal/servingcert"
)

// Options configure Serve.
type Options struct {
	// Addr is host:port; tests use 127.0.0.1:0.
	Addr string
	// CertFile and KeyFile enable TLS when both are set; they are read
	// again when they change (a rotated, mounted Secret).
	CertFile, KeyFile string
	// ShutdownTimeout bounds how long in-flight requests may finish.
	ShutdownTimeout time.Duration
	// ReadTimeout and WriteTimeout default to 30s; big extender requests
	// need the room.
	ReadTimeout, WriteTimeout time.Duration
	// ConnState, if set, sees every connection's state changes (ConnCounter).
	ConnState func(net.Conn, http.ConnState)
}

// Serve listens on o.Addr and serves h until ctx is done, then shuts down
// gracefully. ready, if non-nil, receives the bound address once listening.
func Serve(ctx context.Context, o Options, h http.Handler, ready func(addr net.Addr)) error {
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", o.Addr, err)
	}
	return ServeListener(ctx, o, ln, h, ready)
}

// ServeListener is Serve on an existing listener.
func ServeListener(ctx context.Context, o Options, ln net.Listener, h http.Handler, ready func(addr net.Addr)) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       orDefault(o.ReadTimeout, 30*time.Second),
		WriteTimeout:      orDefault(o.WriteTimeout, 30*time.Second),
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ConnState:         o.ConnState,
	}
	tlsOn := o.CertFile != "" && o.KeyFile != ""
	if tlsOn {
		files, err := servingcert.FromFiles("serving", o.CertFile, o.KeyFile)
		if err != nil {
			ln.Close()
			return err
		}
		fctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go files.Run(fctx)
		srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: files.GetCertificate}
	}
	errc := make(chan error, 1)
	go func() {
		if tlsOn {
			errc <- srv.ServeTLS(ln, "", "")
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	klog.InfoS("Serving HTTP", "addr", ln.Addr().String(), "tls", o.CertFile != "")
	if ready != nil {
		ready(ln.Addr())
	}
	select {
	case err := <-errc:
		return fmt.Errorf("serving on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), orDefault(o.ShutdownTimeout, 10*time.Second))
	defer cancel()
	klog.InfoS("Shutting down HTTP server", "addr", ln.Addr().String())
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutting down %s: %w", ln.Addr(), err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
