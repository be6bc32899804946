package servingcert

import (
	"context"
	"crypto/x509"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggfake "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset/fake"
	testingclock "k8s.io/utils/clock/testing"
)

const (
	testNS     = "capscale-system"
	testSecret = "capscale-serving-cert"
	testAPI    = "v1beta1.external.metrics.k8s.io"
)

var testService = Service{Namespace: testNS, Name: "capscale-metrics-adapter"}

type fixture struct {
	t     *testing.T
	kube  *fake.Clientset
	agg   *aggfake.Clientset
	clock *testingclock.FakeClock
	m     *Manager
}

func newFixture(t *testing.T, api *apiregv1.APIService) *fixture {
	t.Helper()
	f := &fixture{t: t, kube: fake.NewClientset(), clock: testingclock.NewFakeClock(time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC))}
	if api != nil {
		f.agg = aggfake.NewSimpleClientset(api)
	} else {
		f.agg = aggfake.NewSimpleClientset()
	}
	var err error
	f.m, err = New(f.kube, f.agg, Options{
		Namespace: testNS, SecretName: testSecret,
		DNSNames:   []string{"capscale-metrics-adapter.capscale-system.svc", "capscale-workload-api.capscale-system.svc"},
		APIService: testAPI, Service: testService,
		CAValidity: 90 * time.Minute, CertValidity: 30 * time.Minute, PropagationDelay: 5 * time.Second,
		Clock: f.clock,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go f.m.Run(ctx)
	return f
}

func ourAPIService(caBundle []byte) *apiregv1.APIService {
	return &apiregv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: testAPI},
		Spec: apiregv1.APIServiceSpec{Group: "external.metrics.k8s.io", Version: "v1beta1",
			Service: &apiregv1.ServiceReference{Namespace: testNS, Name: testService.Name}, CABundle: caBundle},
	}
}

// eventually polls cond for up to 10 s of real time.
func (f *fixture) eventually(what string, cond func() bool) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			f.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (f *fixture) secret() *corev1.Secret {
	s, err := f.kube.CoreV1().Secrets(testNS).Get(context.Background(), testSecret, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return s
}

func (f *fixture) caBundle() []byte {
	a, err := f.agg.ApiregistrationV1().APIServices().Get(context.Background(), testAPI, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return a.Spec.CABundle
}

func (f *fixture) served() *x509.Certificate {
	c, _ := f.m.Serving().CurrentCertKeyContent()
	if c == nil {
		return nil
	}
	certs, err := parseCerts(c)
	if err != nil {
		f.t.Fatal(err)
	}
	return certs[0]
}

// verifies reports whether the served certificate verifies against the
// APIService's caBundle for the adapter's name, at the fake clock's time:
// what the aggregator checks on every request.
func (f *fixture) verifies() bool { return f.verifiesAgainst(f.caBundle()) }

func (f *fixture) verifiesAgainst(caBundle []byte) bool {
	leaf := f.served()
	if leaf == nil {
		return false
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caBundle) {
		return false
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "capscale-metrics-adapter.capscale-system.svc", CurrentTime: f.clock.Now()})
	return err == nil
}

func TestCreatesSecretAndCABundle(t *testing.T) {
	f := newFixture(t, ourAPIService(nil))
	f.eventually("the Secret, the caBundle and a served certificate", func() bool {
		return f.secret() != nil && len(f.caBundle()) > 0 && f.served() != nil
	})
	s := f.secret()
	for _, k := range []string{KeyCABundle, KeyCAKey, KeyCert, KeyKey} {
		if len(s.Data[k]) == 0 {
			t.Errorf("Secret has no %s", k)
		}
	}
	if string(f.caBundle()) != string(s.Data[KeyCABundle]) {
		t.Errorf("caBundle differs from the Secret's ca.crt")
	}
	if !f.verifies() {
		t.Errorf("the served certificate does not verify against the caBundle")
	}
	if got := f.served().DNSNames; len(got) != 2 {
		t.Errorf("served certificate names %v", got)
	}
}

func TestPutsBackACABundleChangedBySomeoneElse(t *testing.T) {
	f := newFixture(t, ourAPIService(nil))
	f.eventually("a caBundle", func() bool { return len(f.caBundle()) > 0 })
	want := f.caBundle()
	other, err := newCA(f.clock.Now(), time.Hour, "keda")
	if err != nil {
		t.Fatal(err)
	}
	api, _ := f.agg.ApiregistrationV1().APIServices().Get(context.Background(), testAPI, metav1.GetOptions{})
	api.Spec.CABundle = encodeCerts(other.cert)
	if _, err := f.agg.ApiregistrationV1().APIServices().Update(context.Background(), api, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("the caBundle put back", func() bool { return string(f.caBundle()) == string(want) })
}

func TestLeavesAnotherOwnersAPIServiceAlone(t *testing.T) {
	keda := &apiregv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: testAPI},
		Spec: apiregv1.APIServiceSpec{Service: &apiregv1.ServiceReference{Namespace: "keda", Name: "keda-operator-metrics-apiserver"},
			CABundle: []byte("keda's")},
	}
	f := newFixture(t, keda)
	f.eventually("a served certificate", func() bool { return f.served() != nil })
	if got := string(f.caBundle()); got != "keda's" {
		t.Errorf("KEDA's caBundle changed to %q", got)
	}
}

// TestRotationNeverServesAnUntrustedCertificate steps the clock through a
// serving-certificate renewal and two CA rotations, checking at every step
// that what is served verifies against the APIService's caBundle.
func TestRotationNeverServesAnUntrustedCertificate(t *testing.T) {
	f := newFixture(t, ourAPIService(nil))
	f.eventually("a trusted served certificate", f.verifies)
	// Every change of the served certificate is checked the moment it
	// happens, against the caBundle as the aggregator sees it: as it was
	// 3s (of the fake clock) earlier, less than the 5s propagation delay.
	lagged := f.laggedCABundle(3 * time.Second)
	var untrusted []string
	var mu sync.Mutex
	f.m.Serving().AddListener(listenerFunc(func() {
		if !f.verifiesAgainst(lagged()) {
			mu.Lock()
			untrusted = append(untrusted, f.clock.Now().Format(time.TimeOnly))
			mu.Unlock()
		}
	}))
	first := f.served()
	firstCA := f.secret().Data[KeyCABundle]
	var leaves, cas = map[string]bool{fingerprint(first): true}, map[string]bool{}
	// 4 h in 5 s steps: 8 leaf lifetimes, 2.7 CA lifetimes.
	for i := 0; i < 4*720; i++ {
		f.clock.Step(5 * time.Second)
		// Let the Manager react to the step (and to its own writes).
		time.Sleep(2 * time.Millisecond)
		if i%12 == 0 {
			f.eventually("the served certificate to verify", f.verifies)
		}
		if c := f.served(); c != nil {
			leaves[fingerprint(c)] = true
		}
		if certs, err := parseCerts(f.secret().Data[KeyCABundle]); err == nil {
			cas[fingerprint(certs[0])] = true
			if len(certs) > 2 {
				t.Fatalf("%d CAs in the bundle: expired ones are not dropped", len(certs))
			}
		}
	}
	f.eventually("the served certificate to verify", f.verifies)
	mu.Lock()
	if len(untrusted) > 0 {
		t.Errorf("served %d certificates the caBundle did not verify, at %v", len(untrusted), untrusted)
	}
	mu.Unlock()
	if len(leaves) < 6 {
		t.Errorf("served %d certificates in 4 h of 30 min certificates", len(leaves))
	}
	if len(cas) < 3 {
		t.Errorf("%d CAs in 4 h of 90 min CAs", len(cas))
	}
	if string(f.secret().Data[KeyCABundle]) == string(firstCA) {
		t.Errorf("the CA bundle never changed")
	}
}

// TestBacksOffFromACABundleFight: another writer that keeps rewriting the
// caBundle (KEDA's operator with APIService patching on) is answered with
// put-backs spaced ever further apart, not a loop.
func TestBacksOffFromACABundleFight(t *testing.T) {
	f := newFixture(t, ourAPIService(nil))
	f.eventually("a caBundle", func() bool { return len(f.caBundle()) > 0 })
	want := string(f.caBundle())
	other, err := newCA(f.clock.Now(), time.Hour, "keda")
	if err != nil {
		t.Fatal(err)
	}
	overwrite := func() {
		api, _ := f.agg.ApiregistrationV1().APIServices().Get(context.Background(), testAPI, metav1.GetOptions{})
		api.Spec.CABundle = encodeCerts(other.cert)
		if _, err := f.agg.ApiregistrationV1().APIServices().Update(context.Background(), api, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	overwrite()
	f.eventually("the first put-back, at once", func() bool { return string(f.caBundle()) == want })
	overwrite()
	time.Sleep(300 * time.Millisecond)
	if string(f.caBundle()) == want {
		t.Fatalf("the second put-back came at once: no backoff")
	}
	f.clock.Step(1100 * time.Millisecond)
	f.eventually("the second put-back after 1s", func() bool { return string(f.caBundle()) == want })
}

type listenerFunc func()

func (f listenerFunc) Enqueue() { f() }

// laggedCABundle watches the APIService and returns a function giving its
// caBundle as it was lag ago by the fake clock: a slower watcher's view.
func (f *fixture) laggedCABundle(lag time.Duration) func() []byte {
	type seen struct {
		at     time.Time
		bundle []byte
	}
	var mu sync.Mutex
	history := []seen{{at: f.clock.Now(), bundle: f.caBundle()}}
	w, err := f.agg.ApiregistrationV1().APIServices().Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			if api, ok := ev.Object.(*apiregv1.APIService); ok {
				mu.Lock()
				history = append(history, seen{at: f.clock.Now(), bundle: api.Spec.CABundle})
				mu.Unlock()
			}
		}
	}()
	return func() []byte {
		mu.Lock()
		defer mu.Unlock()
		cut := f.clock.Now().Add(-lag)
		b := history[0].bundle
		for _, h := range history {
			if !h.at.After(cut) {
				b = h.bundle
			}
		}
		return b
	}
}

// TestShortLifetimesRenewAfterIssue: with lifetimes shorter than the
// backdate, a new CA or certificate is not already due at once (that was a
// loop of CA rotations with a 45 s CA).
func TestShortLifetimesRenewAfterIssue(t *testing.T) {
	now := time.Now()
	for _, v := range []time.Duration{15 * time.Second, 45 * time.Second, time.Hour, 5 * 365 * 24 * time.Hour} {
		ca, err := newCA(now, v, "t")
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := newLeaf(now, v, []string{"a.b.svc"}, ca)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []*x509.Certificate{ca.cert, leaf.cert} {
			if at := renewAt(c); !at.After(now.Add(v / 2)) {
				t.Errorf("lifetime %s: renewal due at %s, %s after issue", v, at, at.Sub(now))
			}
		}
	}
}
