package provider

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/rest"
	emv1beta1 "k8s.io/metrics/pkg/apis/external_metrics/v1beta1"
	"sigs.k8s.io/custom-metrics-apiserver/pkg/apiserver"

	"github.com/capscale/capscale/internal/names"
)

// TestHandlers stands up the real custom-metrics-apiserver handler chain
// (without authn/authz, which the delegating options add in production)
// around the provider and checks the wire answers, including the Status
// bodies of errors.
func TestHandlers(t *testing.T) {
	sampled := now.Add(-20 * time.Second)
	p, _ := newTestProvider(t, fakeSources{"gpu-load": reading(0.83, sampled)},
		deployment("web", "shop", 2, 2, qpsAnn("800", "500")),
	)

	cfg := genericapiserver.NewConfig(apiserver.Codecs)
	cfg.ExternalAddress = "127.0.0.1:443"
	cfg.LoopbackClientConfig = &rest.Config{}
	srv, err := (&apiserver.Config{GenericConfig: cfg}).Complete(nil).New("capscale-test", nil, p)
	if err != nil {
		t.Fatalf("building the API server: %v", err)
	}
	ts := httptest.NewServer(srv.GenericAPIServer.Handler)
	t.Cleanup(ts.Close)

	const base = "/apis/external.metrics.k8s.io/v1beta1"
	get := func(t *testing.T, path string, selector string) (int, []byte) {
		t.Helper()
		u := ts.URL + path
		if selector != "" {
			u += "?labelSelector=" + url.QueryEscape(selector)
		}
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, body
	}

	t.Run("discovery lists the four metrics", func(t *testing.T) {
		code, body := get(t, base, "")
		if code != http.StatusOK {
			t.Fatalf("status %d: %s", code, body)
		}
		var rl metav1.APIResourceList
		if err := json.Unmarshal(body, &rl); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range rl.APIResources {
			got = append(got, r.Name)
		}
		for _, want := range []string{names.LoadIndexMetric, names.DesiredReplicasMetric, names.TotalQPSMetric, names.RealQPSMetric} {
			if !strings.Contains(strings.Join(got, " "), want) {
				t.Errorf("discovery %v lacks %s", got, want)
			}
		}
	})

	okCases := []struct {
		name, path, selector, value string
		ts                          time.Time
	}{
		{"load index", base + "/namespaces/web/" + names.LoadIndexMetric, "source=gpu-load", "830m", sampled},
		{"qps desired", base + "/namespaces/web/" + names.DesiredReplicasMetric, "workload=shop,policy=qps", "2", now},
	}
	for _, tc := range okCases {
		t.Run(tc.name, func(t *testing.T) {
			code, body := get(t, tc.path, tc.selector)
			if code != http.StatusOK {
				t.Fatalf("status %d: %s", code, body)
			}
			var list emv1beta1.ExternalMetricValueList
			if err := json.Unmarshal(body, &list); err != nil {
				t.Fatal(err)
			}
			if len(list.Items) != 1 {
				t.Fatalf("%d items, want 1: %s", len(list.Items), body)
			}
			if v := list.Items[0].Value.String(); v != tc.value {
				t.Errorf("value %s, want %s", v, tc.value)
			}
			if !list.Items[0].Timestamp.Time.Equal(tc.ts) {
				t.Errorf("timestamp %v, want %v", list.Items[0].Timestamp.Time, tc.ts)
			}
		})
	}

	errCases := []struct {
		name, path, selector string
		code                 int
		reason               metav1.StatusReason
		msg                  string
	}{
		{"unknown metric", base + "/namespaces/web/nope", "a=b", 404, metav1.StatusReasonNotFound, "could not find the metric nope"},
		{"unknown source", base + "/namespaces/web/" + names.LoadIndexMetric, "source=other", 404, metav1.StatusReasonNotFound, `"other" not found`},
		{"unknown workload", base + "/namespaces/web/" + names.DesiredReplicasMetric, "workload=ghost,policy=qps", 404, metav1.StatusReasonNotFound, "ghost"},
		{"missing selector", base + "/namespaces/web/" + names.LoadIndexMetric, "", 400, metav1.StatusReasonBadRequest, "missing label source"},
		{"set-based selector", base + "/namespaces/web/" + names.LoadIndexMetric, "source in (a,b)", 400, metav1.StatusReasonBadRequest, "set-based"},
		{"bad policy", base + "/namespaces/web/" + names.DesiredReplicasMetric, "workload=shop,policy=cpu", 400, metav1.StatusReasonBadRequest, `got "cpu"`},
	}
	for _, tc := range errCases {
		t.Run(tc.name, func(t *testing.T) {
			code, body := get(t, tc.path, tc.selector)
			if code != tc.code {
				t.Fatalf("status %d, want %d: %s", code, tc.code, body)
			}
			var st metav1.Status
			if err := json.Unmarshal(body, &st); err != nil || st.Kind != "Status" {
				t.Fatalf("body is not a Status (%v): %s", err, body)
			}
			if st.Reason != tc.reason || !strings.Contains(st.Message, tc.msg) {
				t.Errorf("Status reason %q message %q, want %q containing %q", st.Reason, st.Message, tc.reason, tc.msg)
			}
		})
	}
}
