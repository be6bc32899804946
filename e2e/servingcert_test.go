//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

const externalMetricsAPIService = "v1beta1.external.metrics.k8s.io"

// TestAdapterManagedCert (issue 44): two adapter replicas, as the chart runs
// them, make their own CA and serving certificate in the Secret
// capscale-serving-cert and write the APIService's caBundle, which is
// registered without one. With a 15s certificate and a 45s CA, about ten
// certificates and two CAs go by while an HPA reads capscale's metric every
// 2s and the test reads it through the aggregator every 200ms: no read
// fails, and the HPA never reports ScalingActive=False nor a
// FailedGetExternalMetric event. A caBundle changed by someone else is put
// back.
func TestAdapterManagedCert(t *testing.T) {
	s, _ := startAdapterStack(t, 0.65, func(o *stack.Options) {
		o.AdapterManagedCert = true
		o.AdapterReplicas = 2
		o.AdapterArgs = append(o.AdapterArgs, "--serving-cert-validity=15s", "--serving-cert-ca-validity=45s",
			"--serving-cert-propagation-delay=2s")
	})
	ctx := testContext(t, 4*time.Minute)
	ac, err := aggregator.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client.AppsV1().Deployments(adapterNS).Create(ctx, SimpleDeployment(adapterNS, "gpu", 4, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hpa := desiredReplicasHPA("gpu", names.PolicyLoadStep, 1, 20)
	if _, err := s.Client.AutoscalingV2().HorizontalPodAutoscalers(adapterNS).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitHPAActive(ctx, t, s, "gpu")
	watch := watchHPA(ctx, t, s, "gpu")
	answers := watchAnswers(ctx, t, s, names.DesiredReplicasMetric, "workload=gpu,policy=load-step")
	start := time.Now()

	// 100s of rotation, recording every certificate and CA the Secret holds.
	leaves, cas := map[string]bool{}, map[string]bool{}
	for time.Since(start) < 100*time.Second {
		sec, err := s.Client.CoreV1().Secrets(stack.Namespace).Get(ctx, stack.ServingCertSecret, metav1.GetOptions{})
		if err == nil {
			leaves[string(sec.Data["tls.crt"])] = true
			if c := firstCert(sec.Data["ca.crt"]); c != nil {
				cas[c.Subject.CommonName] = true
			}
		}
		time.Sleep(time.Second)
	}
	answers.noErrorsBetween(t, start, time.Now(), "while the serving certificate rotated")
	seen, inactive := watch.report()
	if len(inactive) > 0 {
		t.Errorf("the HPA reported ScalingActive=False %d times in %d statuses: %v", len(inactive), seen, inactive)
	}
	failedEvents(ctx, t, s, "gpu")
	if len(leaves) < 6 || len(cas) < 2 {
		t.Errorf("%d serving certificates and %d CAs in 100s, want about 10 and 2: the rotation did not run", len(leaves), len(cas))
	}
	t.Logf("%d answers through the aggregator, %d serving certificates, %d CAs, %d HPA statuses", answers.count(), len(leaves), len(cas), seen)

	// Someone else's caBundle is put back.
	api, err := ac.ApiregistrationV1().APIServices().Get(ctx, externalMetricsAPIService, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := api.Spec.CABundle
	api.Spec.CABundle = s.PKI.ClusterCA.CAData()
	if _, err := ac.ApiregistrationV1().APIServices().Update(ctx, api, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		api, err := ac.ApiregistrationV1().APIServices().Get(ctx, externalMetricsAPIService, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		// The bundle may have rotated meanwhile: it must be capscale's again.
		sec, err := s.Client.CoreV1().Secrets(stack.Namespace).Get(ctx, stack.ServingCertSecret, metav1.GetOptions{})
		return err == nil && bytes.Equal(api.Spec.CABundle, sec.Data["ca.crt"]) && !bytes.Equal(api.Spec.CABundle, s.PKI.ClusterCA.CAData()), nil
	})
	if err != nil {
		t.Fatalf("the caBundle changed by someone else was not put back (it was %d bytes)", len(want))
	}
	t.Logf("caBundle put back %v after someone else changed it", time.Since(changed).Round(time.Millisecond))
	// And the metric is served again through it.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := externalMetric(ctx, s, names.DesiredReplicasMetric, "workload=gpu,policy=load-step")
		return err == nil, nil
	})
	if err != nil {
		t.Fatal("no metric through the aggregator after the caBundle was put back")
	}
}

func firstCert(b []byte) *x509.Certificate {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil
	}
	return c
}

// failedEvents fails the test for every FailedGetExternalMetric event of
// the HPA: the HPA controller's own record of a read that failed.
func failedEvents(ctx context.Context, t *testing.T, s *stack.Stack, hpa string) {
	t.Helper()
	evs, err := s.Client.CoreV1().Events(adapterNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + hpa})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Type == corev1.EventTypeWarning && (e.Reason == "FailedGetExternalMetric" || e.Reason == "FailedComputeMetricsReplicas") {
			t.Errorf("HPA %s: %s x%d: %s", hpa, e.Reason, e.Count, e.Message)
		}
	}
}
