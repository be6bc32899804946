package stack

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"time"
)

// probeAsAggregator asks the adapter at url for its API group version the
// way kube-aggregator's availability check does (its proxy client
// certificate, X-Remote-User system:kube-aggregator in system:masters)
// and wants 200: an adapter that reports ready must already verify the
// aggregator, or the aggregator marks its APIService unavailable and an
// HPA misses a sync (TestRealKEDADelegation saw a 403 so).
func (s *Stack) probeAsAggregator(ctx context.Context, c *http.Client, url string) error {
	pair, err := tls.LoadX509KeyPair(s.Plane.PKI.FrontProxyClient.CertFile, s.Plane.PKI.FrontProxyClient.KeyFile)
	if err != nil {
		return err
	}
	tr, ok := c.Transport.(*http.Transport)
	if !ok {
		return fmt.Errorf("adapter client transport %T", c.Transport)
	}
	tr = tr.Clone()
	if tr.TLSClientConfig == nil {
		return fmt.Errorf("adapter client without a TLS configuration")
	}
	tr.TLSClientConfig.Certificates = []tls.Certificate{pair}
	probe := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/apis/external.metrics.k8s.io/v1beta1", nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-Remote-User", "system:kube-aggregator")
	req.Header.Set("X-Remote-Group", "system:masters")
	resp, err := probe.Do(req)
	if err != nil {
		return fmt.Errorf("the aggregator's probe of the ready adapter at %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the adapter at %s reported ready, yet answers the aggregator's probe %d: %s", url, resp.StatusCode, body)
	}
	return nil
}
