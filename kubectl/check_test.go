package kubectl

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/capscale/capscale/internal/names"
)

// TestCheckScheduling: the probe pod asks for one underlay IP and names the
// scheduler; bound, or refused for underlay IPs, passes; neither fails
// naming the scheduler; the pod is deleted every time.
func TestCheckScheduling(t *testing.T) {
	for _, tc := range []struct {
		name    string
		act     func(p *corev1.Pod) // what "the scheduler" does to the pod
		want    string
		wantErr string
	}{
		{name: "bound", act: func(p *corev1.Pod) { p.Spec.NodeName = "node-1" }, want: "scheduled on node-1 by capscale-scheduler"},
		{name: "refused for IPs", act: func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
				Message: "0/2 nodes are available: 2 underlay IPs exhausted: 3/3 used, pod needs 1."}}
		}, want: "refused by capscale-scheduler for want of underlay IPs"},
		{name: "refused for another reason", act: func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
				Message: "0/2 nodes are available: 2 node(s) had untolerated taint."}}
		}, wantErr: "untolerated taint"},
		{name: "no scheduler", act: func(*corev1.Pod) {}, wantErr: "capscale-scheduler neither bound it nor refused it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset()
			var created *corev1.Pod
			c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				created = a.(k8stesting.CreateAction).GetObject().(*corev1.Pod).DeepCopy()
				created.Name = "capscale-check-abcde"
				tc.act(created)
				return true, created, nil
			})
			deleted := ""
			c.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if deleted != "" {
					return true, nil, apierrors.NewNotFound(corev1.Resource("pods"), deleted)
				}
				return true, created, nil
			})
			c.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				d := a.(k8stesting.DeleteActionImpl)
				if d.DeleteOptions.GracePeriodSeconds != nil {
					t.Errorf("the probe pod deleted with grace %d: never forced", *d.DeleteOptions.GracePeriodSeconds)
				}
				deleted = d.GetName()
				return true, nil, nil
			})
			o := checkOptions{scheduler: "capscale-scheduler", image: "img", timeout: 300 * time.Millisecond}
			line, err := checkScheduling(context.Background(), c, "capscale-system", o, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("err = %v, want %q", err, tc.wantErr)
				}
			} else if err != nil || !strings.Contains(line, tc.want) {
				t.Errorf("line %q err %v, want %q", line, err, tc.want)
			}
			if deleted != "capscale-check-abcde" {
				t.Errorf("deleted %q, want the probe pod", deleted)
			}
			ctr := created.Spec.Containers[0]
			if created.Spec.SchedulerName != "capscale-scheduler" || ctr.Resources.Limits.Name(names.UnderlayIPResource, "").Value() != 1 ||
				ctr.Resources.Requests.Name(names.UnderlayIPResource, "").Value() != 1 || ctr.Image != "img" {
				t.Errorf("probe pod %+v", created.Spec)
			}
		})
	}
}

// TestCheckMetrics: each metric is read with its selector; no value, an
// error or a list without capscale's metric fails.
func TestCheckMetrics(t *testing.T) {
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL.Path+"?"+r.URL.RawQuery)
		// As custom-metrics-apiserver: JSON or nothing (the discovery
		// client's aggregated-discovery Accept got "unknown" on a cluster).
		if r.Header.Get("Accept") != "application/json" {
			http.Error(w, "", http.StatusNotAcceptable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == externalMetricsPath:
			_, _ = io.WriteString(w, `{"kind":"APIResourceList","groupVersion":"external.metrics.k8s.io/v1beta1","resources":[{"name":"capscale-load-index","namespaced":true,"kind":"ExternalMetricValueList","verbs":["get"]}]}`)
		case strings.HasSuffix(r.URL.Path, "/capscale-load-index") && r.URL.Query().Get("labelSelector") == "source=shop":
			_, _ = io.WriteString(w, `{"kind":"ExternalMetricValueList","apiVersion":"external.metrics.k8s.io/v1beta1","metadata":{},"items":[{"metricName":"capscale-load-index","timestamp":"2026-11-29T07:00:00Z","value":"400m"}]}`)
		case strings.HasSuffix(r.URL.Path, "/capscale-load-index") && r.URL.Query().Get("labelSelector") == "source=denied":
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"capscale-load-index.external.metrics.k8s.io is forbidden: User \"u\" cannot list resource","reason":"Forbidden","code":403}`)
		case strings.HasSuffix(r.URL.Path, "/capscale-load-index"):
			_, _ = io.WriteString(w, `{"kind":"ExternalMetricValueList","apiVersion":"external.metrics.k8s.io/v1beta1","metadata":{},"items":[]}`)
		default:
			http.Error(w, `{"kind":"Status","status":"Failure","reason":"NotFound","code":404}`, http.StatusNotFound)
		}
	}))
	defer srv.Close()
	c, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lines, err := checkMetrics(ctx, c, "shop", []string{"capscale-load-index:source=shop"})
	if err != nil || len(lines) != 1 || lines[0] != "external metric capscale-load-index{source=shop} in shop: 400m" {
		t.Errorf("lines %q err %v", lines, err)
	}
	if want := externalMetricsPath + "/namespaces/shop/capscale-load-index?labelSelector=source%3Dshop"; asked[0] != want {
		t.Errorf("asked %q, want %q", asked[0], want)
	}
	if lines, err := checkMetrics(ctx, c, "shop", nil); err != nil || len(lines) != 1 || !strings.Contains(lines[0], "capscale-load-index among them") {
		t.Errorf("the list: %q %v", lines, err)
	}
	_, err = checkMetrics(ctx, c, "shop", []string{"capscale-load-index:source=denied"})
	if err == nil || !strings.Contains(err.Error(), "cannot list resource") {
		t.Errorf("a refusal: %v, want the apiserver's words", err)
	}
	if err := explain(err, "check", false); err == nil || !strings.Contains(err.Error(), "ClusterRole capscale-kubectl:check") {
		t.Errorf("a refusal explained: %v, want the ClusterRole that grants check's reads", err)
	}
	for _, m := range []string{"capscale-load-index:source=other", "capscale-total-qps"} {
		if _, err := checkMetrics(ctx, c, "shop", []string{m}); err == nil {
			t.Errorf("%s: no error", m)
		}
	}
}

// TestCheckFlags: the scheduling check needs an image; a metric needs a name.
func TestCheckFlags(t *testing.T) {
	for _, tc := range []struct {
		o    checkOptions
		want string
	}{
		{o: checkOptions{scheduler: "capscale-scheduler", timeout: time.Second}, want: "--image"},
		{o: checkOptions{timeout: time.Second, external: true, metrics: []string{":a=b"}}, want: "names no metric"},
		{o: checkOptions{timeout: time.Second, metrics: []string{"m"}}, want: "--external-metrics=false skips"},
		{o: checkOptions{timeout: 0}, want: "--timeout"},
		{o: checkOptions{timeout: time.Second}},
	} {
		err := tc.o.validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.o, err, tc.want)
		}
	}
}
