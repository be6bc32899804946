package kedascaler

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	pb "github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/capscale/capscale/internal/servingcert"
)

// Bounds on what one client can make the server hold.
const (
	// maxRecvBytes bounds a request: a ScaledObjectRef with its metadata is
	// well under 1 KiB.
	maxRecvBytes = 64 << 10
	// maxStreamsPerConn bounds concurrent calls on one connection.
	maxStreamsPerConn = 100
	// handshakeTimeout bounds a TLS handshake.
	handshakeTimeout = 10 * time.Second
	// shutdownTimeout is how long in-flight calls may finish on shutdown.
	shutdownTimeout = 5 * time.Second
)

// Options configure the external-scaler server.
type Options struct {
	// BindAddress is host:port to listen on.
	BindAddress string
	// CertFile and KeyFile are the PEM serving certificate and key,
	// reloaded when they change; unused when Serving is set.
	CertFile, KeyFile string
	// Serving, if set, is the serving pair (the adapter's own, made and
	// rotated by servingcert.Manager).
	Serving interface{ CurrentCertKeyContent() ([]byte, []byte) }
	// ClientCAFile, if set, is the PEM CA that client certificates must
	// verify against (reloaded when it changes); empty accepts any client.
	ClientCAFile string
	// StreamInterval is how often a StreamIsActive stream re-evaluates.
	StreamInterval time.Duration
	// MaxStreams is the most StreamIsActive streams open at once.
	MaxStreams int
	// Ready, if set, gates every call: before it is true (informers not
	// synced) calls are Unavailable rather than answered from empty caches.
	Ready func() bool
	// Clock defaults to the real clock.
	Clock clock.WithTicker
}

// Server serves the external-scaler protocol over TLS.
type Server struct {
	opts     Options
	grpc     *grpc.Server
	serving  interface{ CurrentCertKeyContent() ([]byte, []byte) }
	files    *servingcert.Files // nil when Options.Serving is set
	clientCA *dynamiccertificates.DynamicFileCAContent
	done     chan struct{}

	mu       sync.Mutex
	certPEM  []byte
	certPair tls.Certificate
}

// New builds the server over p, reading the certificate files now so that
// a bad file is a startup error.
func New(p cmprovider.ExternalMetricsProvider, o Options, m *Metrics) (*Server, error) {
	switch {
	case p == nil || m == nil:
		return nil, errors.New("the KEDA scaler needs a provider and metrics")
	case o.StreamInterval <= 0 || o.MaxStreams < 1:
		return nil, fmt.Errorf("the KEDA scaler needs a positive stream interval and stream limit, got %s and %d", o.StreamInterval, o.MaxStreams)
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	s := &Server{opts: o, done: make(chan struct{})}
	var err error
	if o.Serving != nil {
		s.serving = o.Serving
	} else {
		if s.files, err = servingcert.FromFiles("keda-scaler-serving", o.CertFile, o.KeyFile); err != nil {
			return nil, fmt.Errorf("the KEDA scaler: %w", err)
		}
		s.serving = s.files
	}
	if o.ClientCAFile != "" {
		if s.clientCA, err = dynamiccertificates.NewDynamicCAContentFromFile("keda-scaler-client-ca", o.ClientCAFile); err != nil {
			return nil, fmt.Errorf("loading the KEDA scaler's client CA: %w", err)
		}
	}

	s.grpc = grpc.NewServer(
		grpc.Creds(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: s.tlsConfig})),
		grpc.MaxRecvMsgSize(maxRecvBytes),
		grpc.MaxConcurrentStreams(maxStreamsPerConn),
		grpc.ConnectionTimeout(handshakeTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: 15 * time.Minute}),
		grpc.ChainUnaryInterceptor(m.unary),
		grpc.ChainStreamInterceptor(m.stream),
	)
	pb.RegisterExternalScalerServer(s.grpc, &Scaler{
		provider: p,
		ready:    o.Ready,
		streams: streamOptions{
			clock:    o.Clock,
			interval: o.StreamInterval,
			slots:    make(chan struct{}, o.MaxStreams),
			done:     s.done,
		},
	})
	return s, nil
}

// certificate parses the current serving pair, again only when it changed.
func (s *Server) certificate() (tls.Certificate, error) {
	certPEM, keyPEM := s.serving.CurrentCertKeyContent()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.certPEM != nil && bytes.Equal(certPEM, s.certPEM) {
		return s.certPair, nil
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("the KEDA scaler's serving certificate %s: %w", s.opts.CertFile, err)
	}
	s.certPEM, s.certPair = certPEM, pair
	return pair, nil
}

// tlsConfig is each handshake's config: the current serving pair and, with
// a client CA, a verified client certificate.
func (s *Server) tlsConfig(*tls.ClientHelloInfo) (*tls.Config, error) {
	pair, err := s.certificate()
	if err != nil {
		return nil, err
	}
	// gRPC needs ALPN "h2"; a config returned here replaces the base one.
	c := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}, Certificates: []tls.Certificate{pair}}
	if s.clientCA != nil {
		opts, ok := s.clientCA.VerifyOptions()
		if !ok {
			return nil, fmt.Errorf("the KEDA scaler's client CA %s holds no certificate", s.opts.ClientCAFile)
		}
		c.ClientCAs, c.ClientAuth = opts.Roots, tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// Run listens on BindAddress and serves until ctx is done, then stops:
// open streams end with Unavailable and in-flight calls get
// shutdownTimeout to finish. Call it once.
func (s *Server) Run(ctx context.Context) error {
	l, err := net.Listen("tcp", s.opts.BindAddress)
	if err != nil {
		return fmt.Errorf("KEDA scaler: %w", err)
	}
	return s.serve(ctx, l)
}

func (s *Server) serve(ctx context.Context, l net.Listener) error {
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if s.files != nil {
		go s.files.Run(ctx)
	}
	if s.clientCA != nil {
		go s.clientCA.Run(ctx, 1)
	} else {
		logger.Info("The KEDA scaler accepts any client: set --keda-scaler-client-ca-file so that only KEDA, with a client certificate, can read metrics")
	}
	logger.Info("Serving KEDA's external-scaler protocol", "address", l.Addr().String(), "clientCertificates", s.clientCA != nil)

	serveErr := make(chan error, 1)
	go func() { serveErr <- s.grpc.Serve(l) }()
	select {
	case err := <-serveErr:
		return fmt.Errorf("KEDA scaler: %w", err)
	case <-ctx.Done():
	}
	close(s.done)
	stopped := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(shutdownTimeout):
		s.grpc.Stop()
		<-stopped
	}
	return nil
}
