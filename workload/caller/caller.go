// Package caller builds, for one request, a Kubernetes client that carries
// the caller's own bearer token, so that the apiserver's authentication,
// RBAC, admission and audit see the caller and not capscale.
//
// The token lives only in the request's client, which is dropped with the
// request: it is never logged, cached or kept. What every caller's client
// shares is the connection pool to the apiserver (TLS verified against the
// API's own CA, no credentials of the API) and one token-bucket rate
// limiter, so that a flood of requests — bogus tokens included — cannot
// become more than QPS calls per second on the apiserver.
package caller

import (
	"fmt"
	"net/http"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"k8s.io/client-go/util/flowcontrol"
)

// Clients makes per-request clients.
type Clients struct {
	cfg  *rest.Config
	base http.RoundTripper
}

// New returns Clients for the apiserver base points at. base's own
// credentials are dropped (rest.AnonymousClientConfig); only its address and
// CA are used. qps and burst bound the calls of all callers together.
func New(base *rest.Config, qps float32, burst int) (*Clients, error) {
	if qps <= 0 || burst < 1 {
		return nil, fmt.Errorf("caller clients need qps > 0 and burst >= 1, got %v and %d", qps, burst)
	}
	cfg := rest.AnonymousClientConfig(base)
	cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(qps, burst)
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the apiserver transport: %w", err)
	}
	return &Clients{cfg: cfg, base: rt}, nil
}

// For returns a client that authenticates as the holder of token.
func (c *Clients) For(token string) (kubernetes.Interface, error) {
	cs, err := kubernetes.NewForConfigAndClient(c.cfg, c.httpClient(token))
	if err != nil {
		return nil, fmt.Errorf("creating the caller's client: %w", err)
	}
	return cs, nil
}

// DynamicFor returns a dynamic client (custom resources such as ElasticWeb)
// that authenticates as the holder of token; it shares the connection pool
// and the rate limiter with every other caller's client.
func (c *Clients) DynamicFor(token string) (dynamic.Interface, error) {
	dc, err := dynamic.NewForConfigAndClient(c.cfg, c.httpClient(token))
	if err != nil {
		return nil, fmt.Errorf("creating the caller's dynamic client: %w", err)
	}
	return dc, nil
}

func (c *Clients) httpClient(token string) *http.Client {
	return &http.Client{Transport: transport.NewBearerAuthRoundTripper(token, c.base)}
}
