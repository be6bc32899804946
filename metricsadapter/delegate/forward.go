package delegate

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/metrics/pkg/apis/external_metrics"
	emv1beta1 "k8s.io/metrics/pkg/apis/external_metrics/v1beta1"

	"github.com/capscale/capscale/metricsadapter/apiservice"
)

// groupPath is the external-metrics API every request goes to.
const groupPath = "/apis/external.metrics.k8s.io/v1beta1"

// Forwarder sends external-metric requests to one delegate Service over
// TLS verified against the recorded CA bundle, as capscale's own identity.
type Forwarder struct {
	target   apiservice.Target
	client   *http.Client
	addrs    func() ([]string, error)
	next     atomic.Uint32
	timeout  time.Duration
	maxBytes int64
	metrics  *Metrics
}

// ForwarderOptions configure a Forwarder.
type ForwarderOptions struct {
	// Target is the delegate's Service and CA bundle.
	Target apiservice.Target
	// Credentials gives the bearer token (file) or client certificate of
	// capscale's ServiceAccount; its CA and host are not used.
	Credentials *rest.Config
	// Addresses returns the host:port candidates to dial (Endpoints, or the
	// Service's DNS name).
	Addresses func() ([]string, error)
	// Timeout bounds each request, MaxBytes each answer.
	Timeout  time.Duration
	MaxBytes int64
	Metrics  *Metrics
}

// NewForwarder builds the delegate's HTTP client: verified TLS with the
// recorded CA bundle and the Service's DNS name (what its serving certificate
// names, as for the aggregator), and capscale's credentials.
func NewForwarder(o ForwarderOptions) (*Forwarder, error) {
	cfg := &rest.Config{
		UserAgent: "capscale-metrics-adapter/delegate",
		TLSClientConfig: rest.TLSClientConfig{
			CAData:     o.Target.CABundle,
			ServerName: o.Target.Name + "." + o.Target.Namespace + ".svc",
		},
	}
	if c := o.Credentials; c != nil {
		cfg.BearerToken, cfg.BearerTokenFile = c.BearerToken, c.BearerTokenFile
		cfg.CertFile, cfg.KeyFile, cfg.CertData, cfg.KeyData = c.CertFile, c.KeyFile, c.CertData, c.KeyData
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the transport to delegate %s: %w", o.Target, err)
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
	return &Forwarder{target: o.Target, client: &http.Client{Transport: rt}, addrs: o.Addresses,
		timeout: o.Timeout, maxBytes: o.MaxBytes, metrics: o.Metrics}, nil
}

// Get forwards one external-metric request. The delegate's list, or its
// Status error, is returned as it answered; failing to get an answer is a
// 503 Status naming the delegate and the reason, so the HPA holds.
func (f *Forwarder) Get(ctx context.Context, namespace, metric string, selector labels.Selector) (*external_metrics.ExternalMetricValueList, error) {
	start := time.Now()
	list, err := f.get(ctx, namespace, metric, selector)
	code := int32(http.StatusOK)
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		code = se.Status().Code
	}
	f.metrics.observe(code, time.Since(start))
	return list, err
}

func (f *Forwarder) get(ctx context.Context, namespace, metric string, selector labels.Selector) (*external_metrics.ExternalMetricValueList, error) {
	q := url.Values{}
	if selector != nil {
		if s := selector.String(); s != "" {
			q.Set("labelSelector", s)
		}
	}
	body, err := f.do(ctx, groupPath+"/namespaces/"+url.PathEscape(namespace)+"/"+url.PathEscape(metric), q)
	if err != nil {
		return nil, err
	}
	var v external_metrics.ExternalMetricValueList
	var wire emv1beta1.ExternalMetricValueList
	if err := json.Unmarshal(body, &wire); err != nil {
		return nil, f.unavailable(fmt.Sprintf("its answer is not an ExternalMetricValueList: %v", err))
	}
	if err := emv1beta1.Convert_v1beta1_ExternalMetricValueList_To_external_metrics_ExternalMetricValueList(&wire, &v, nil); err != nil {
		return nil, f.unavailable(fmt.Sprintf("converting its answer: %v", err))
	}
	return &v, nil
}

// Discover lists the metric names the delegate advertises.
func (f *Forwarder) Discover(ctx context.Context) ([]string, error) {
	body, err := f.do(ctx, groupPath, nil)
	if err != nil {
		return nil, err
	}
	var l metav1.APIResourceList
	if err := json.Unmarshal(body, &l); err != nil {
		return nil, fmt.Errorf("discovery of delegate %s: %w", f.target, err)
	}
	out := make([]string, 0, len(l.APIResources))
	for _, r := range l.APIResources {
		if !strings.Contains(r.Name, "/") {
			out = append(out, r.Name)
		}
	}
	return out, nil
}

// do GETs path from one of the delegate's addresses and returns a 2xx body;
// any other answer is an APIStatus error.
func (f *Forwarder) do(ctx context.Context, path string, q url.Values) ([]byte, error) {
	addrs, err := f.addrs()
	if err != nil {
		return nil, f.unavailable(err.Error())
	}
	addr := addrs[int(f.next.Add(1))%len(addrs)]
	u := url.URL{Scheme: "https", Host: addr, Path: path, RawQuery: q.Encode()}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, f.unavailable(f.reason(ctx, err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, f.maxBytes+1))
	if err == nil && ctx.Err() != nil {
		// net/http may hand over an answer that raced the deadline (seen in
		// CI: an empty 200 written after the cancel); past it, nothing counts.
		err = ctx.Err()
	}
	if err != nil {
		return nil, f.unavailable(f.reason(ctx, err))
	}
	if int64(len(body)) > f.maxBytes {
		return nil, f.unavailable(fmt.Sprintf("its answer is larger than %d bytes", f.maxBytes))
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return body, nil
	}
	var st metav1.Status
	if json.Unmarshal(body, &st) == nil && st.Kind == "Status" {
		// The delegate's own Status, unchanged: the caller sees its reason.
		if st.Code == 0 {
			st.Code = int32(resp.StatusCode)
		}
		return nil, &apierrors.StatusError{ErrStatus: st}
	}
	return nil, f.unavailable(fmt.Sprintf("it answered HTTP %d without a Status", resp.StatusCode))
}

// reason says why a request got no answer, in the operator's terms.
func (f *Forwarder) reason(ctx context.Context, err error) string {
	var unknown x509.UnknownAuthorityError
	var verify *tls.CertificateVerificationError
	var hostname x509.HostnameError
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Sprintf("it did not answer within %s", f.timeout)
	case errors.As(err, &unknown), errors.As(err, &hostname), errors.As(err, &verify):
		return fmt.Sprintf("its serving certificate does not verify against the recorded CA bundle for %s.%s.svc: %v",
			f.target.Name, f.target.Namespace, err)
	default:
		return fmt.Sprintf("it is unreachable: %v", err)
	}
}

func (f *Forwarder) unavailable(reason string) error {
	return apierrors.NewServiceUnavailable(fmt.Sprintf("external metrics delegate %s: %s", f.target, reason))
}
