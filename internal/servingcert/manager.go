// Package servingcert makes and rotates capscale's serving certificates
// in the cluster, so that nothing is made by hand before an install: a CA and
// a serving pair in one Secret that the Manager owns by name, and the caBundle
// of capscale's own APIService kept equal to that Secret's CA bundle.
//
// Rotation never leaves a client with a certificate it cannot verify:
//   - a new CA is added to the bundle (ca.crt, and the APIService's caBundle)
//     before anything it signs is written, and the old CA stays in the
//     bundle until it expires;
//   - a serving certificate from a new CA is issued only once that CA has
//     been in the APIService's caBundle for PropagationDelay, and Serving
//     hands a new certificate to the TLS server only under the same rule;
//   - a caBundle changed by someone else is put back.
//
// Several replicas may run a Manager on the same Secret: every write is a
// compare-and-swap on its resourceVersion, and each replica serves what the
// Secret holds. The library alternative, open-policy-agent/cert-controller
// (KEDA's), needs controller-runtime's manager and cache, which capscale
// does not otherwise link, and rotates the CA and the serving pair in one
// write; this package is client-go only.
package servingcert

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"k8s.io/utils/clock"
)

// Service is the Service an APIService routes to.
type Service struct{ Namespace, Name string }

// Options configure a Manager.
type Options struct {
	// Namespace and SecretName name the Secret the Manager owns.
	Namespace, SecretName string
	// DNSNames are the serving certificate's names; the first is its CN.
	DNSNames []string
	// APIService, if set, is the APIService whose spec.caBundle the Manager
	// keeps equal to the Secret's ca.crt while it routes to Service.
	APIService string
	Service    Service
	// CAValidity and CertValidity are the lifetimes of a new CA and a new
	// serving certificate; each is replaced with a third of it left.
	CAValidity, CertValidity time.Duration
	// PropagationDelay is how long a CA must have been in the APIService's
	// caBundle before a certificate it signed is issued or served: the
	// aggregator's own informer must have seen it too.
	PropagationDelay time.Duration
	// OtherOwner, if set, is called (once per change of the APIService)
	// while the APIService routes to another Service, with the CA bundle it
	// would need: the caller decides whether to take it over.
	OtherOwner func(ctx context.Context, api *apiregv1.APIService, caBundle []byte) error
	// Missing, if set, is called while the APIService is not registered,
	// with the CA bundle it would need: the caller decides whether to
	// register it.
	Missing func(ctx context.Context, caBundle []byte) error
	// Name prefixes the CA's common name.
	Name  string
	Clock clock.WithTicker
}

// Manager keeps the Secret, the APIService's caBundle and the certificate
// served in step.
type Manager struct {
	o       Options
	kube    kubernetes.Interface
	api     aggregator.Interface
	secrets cache.SharedIndexInformer
	apisvcs cache.SharedIndexInformer
	kickc   chan struct{}
	metrics *Metrics

	mu           sync.Mutex
	trustedSince map[string]time.Time // CA fingerprint → first seen in the caBundle
	otherSeen    string               // resourceVersion of the APIService OtherOwner last saw
	// Put-backs of a caBundle someone else wrote, for the backoff that
	// keeps a fight with another writer (KEDA's operator with APIService
	// patching on) from becoming a loop: the n-th in a row waits 2^(n-1) s,
	// at most 5 min; 10 min without one starts over.
	putBacks    int
	lastPutBack time.Time
	written     []byte // the caBundle this Manager last wrote
	serving     *Serving
}

// New builds a Manager; Run starts it.
func New(kube kubernetes.Interface, api aggregator.Interface, o Options, m *Metrics) (*Manager, error) {
	switch {
	case o.Namespace == "" || o.SecretName == "":
		return nil, errors.New("servingcert: the Secret's namespace and name are required")
	case len(o.DNSNames) == 0:
		return nil, errors.New("servingcert: at least one DNS name is required")
	case o.CAValidity <= 0 || o.CertValidity <= 0 || o.CertValidity > o.CAValidity:
		return nil, fmt.Errorf("servingcert: validities must be positive and the certificate's at most the CA's, got CA %s, certificate %s", o.CAValidity, o.CertValidity)
	case o.APIService != "" && (api == nil || o.Service.Name == ""):
		return nil, errors.New("servingcert: keeping an APIService's caBundle needs an aggregator client and the Service it routes to")
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Name == "" {
		o.Name = "capscale"
	}
	if m == nil {
		m = NewMetrics()
	}
	mgr := &Manager{o: o, kube: kube, api: api, kickc: make(chan struct{}, 1), metrics: m, trustedSince: map[string]time.Time{}}
	mgr.serving = newServing(o.SecretName)
	byName := fields.OneTermEqualSelector("metadata.name", o.SecretName).String()
	// ToListWatcherWithWatchListSemantics: a fake clientset says it cannot
	// stream lists, and the reflector then lists as before.
	mgr.secrets = cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, lo metav1.ListOptions) (runtime.Object, error) {
			lo.FieldSelector = byName
			return kube.CoreV1().Secrets(o.Namespace).List(ctx, lo)
		},
		WatchFuncWithContext: func(ctx context.Context, lo metav1.ListOptions) (watch.Interface, error) {
			lo.FieldSelector = byName
			return kube.CoreV1().Secrets(o.Namespace).Watch(ctx, lo)
		},
	}, kube), &corev1.Secret{}, 0, cache.Indexers{})
	if o.APIService != "" {
		apiByName := fields.OneTermEqualSelector("metadata.name", o.APIService).String()
		mgr.apisvcs = cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, lo metav1.ListOptions) (runtime.Object, error) {
				lo.FieldSelector = apiByName
				return api.ApiregistrationV1().APIServices().List(ctx, lo)
			},
			WatchFuncWithContext: func(ctx context.Context, lo metav1.ListOptions) (watch.Interface, error) {
				lo.FieldSelector = apiByName
				return api.ApiregistrationV1().APIServices().Watch(ctx, lo)
			},
		}, api), &apiregv1.APIService{}, 0, cache.Indexers{})
	}
	return mgr, nil
}

// Serving is the certificate to serve: a dynamiccertificates provider for
// the generic API server, and GetCertificate for any other TLS server.
func (m *Manager) Serving() *Serving { return m.serving }

// HasSynced reports whether the Secret (and APIService) were read once.
func (m *Manager) HasSynced() bool {
	return m.secrets.HasSynced() && (m.apisvcs == nil || m.apisvcs.HasSynced())
}

func (m *Manager) kick() {
	select {
	case m.kickc <- struct{}{}:
	default:
	}
}

// Run watches the Secret and the APIService and reconciles until ctx is
// done: on every change, and when the next certificate is due.
func (m *Manager) Run(ctx context.Context) {
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { m.kick() },
		UpdateFunc: func(any, any) { m.kick() },
		DeleteFunc: func(any) { m.kick() },
	}
	_, _ = m.secrets.AddEventHandler(h)
	go m.secrets.Run(ctx.Done())
	informers := []cache.InformerSynced{m.secrets.HasSynced}
	if m.apisvcs != nil {
		_, _ = m.apisvcs.AddEventHandler(h)
		go m.apisvcs.Run(ctx.Done())
		informers = append(informers, m.apisvcs.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), informers...) {
		return
	}
	logger := klog.FromContext(ctx).WithValues("secret", klog.KRef(m.o.Namespace, m.o.SecretName))
	ctx = klog.NewContext(ctx, logger)
	timer := m.o.Clock.NewTimer(0)
	defer timer.Stop()
	backoff := time.Second
	for {
		next, err := m.sync(ctx)
		if err != nil {
			m.metrics.errors.Inc()
			logger.Error(err, "Reconciling the serving certificate; retrying", "in", backoff)
			next = backoff
			backoff = min(2*backoff, time.Minute)
		} else {
			backoff = time.Second
		}
		// Drop a firing not received yet, so that Reset starts clean (a fake
		// clock would otherwise block sending the next one).
		if !timer.Stop() {
			select {
			case <-timer.C():
			default:
			}
		}
		timer.Reset(next)
		select {
		case <-ctx.Done():
			return
		case <-m.kickc:
		case <-timer.C():
		}
	}
}

// state is the Secret as parsed.
type state struct {
	secret *corev1.Secret
	cas    []*x509.Certificate // ca.crt, the signing CA first
	signer pair                // cas[0] and ca.key, when they match
	leaf   pair                // tls.crt and tls.key, when valid
}

func (m *Manager) read() (*state, error) {
	obj, ok, err := m.secrets.GetStore().GetByKey(m.o.Namespace + "/" + m.o.SecretName)
	if err != nil || !ok {
		return nil, err
	}
	s := &state{secret: obj.(*corev1.Secret)}
	if cas, err := parseCerts(s.secret.Data[KeyCABundle]); err == nil {
		s.cas = cas
		if p, err := parsePair(encodeCerts(cas[0]), s.secret.Data[KeyCAKey]); err == nil && p.cert.IsCA {
			s.signer = p
		}
	}
	if p, err := parsePair(s.secret.Data[KeyCert], s.secret.Data[KeyKey]); err == nil {
		s.leaf = p
	}
	return s, nil
}

// sync does the next step of the rotation, if any is due, and returns
// when to look again.
func (m *Manager) sync(ctx context.Context) (time.Duration, error) {
	logger := klog.FromContext(ctx)
	now := m.o.Clock.Now()
	api, ours := m.apiService()
	m.observeTrust(api, ours, now)
	defer m.refreshServing(ctx)

	s, err := m.read()
	if err != nil {
		return 0, err
	}
	if s == nil || s.signer.cert == nil {
		// No Secret, or its CA unusable: a new CA and pair, trusted old CAs kept.
		ca, err := newCA(now, m.o.CAValidity, m.o.Name)
		if err != nil {
			return 0, err
		}
		leaf, err := newLeaf(now, m.o.CertValidity, m.o.DNSNames, ca)
		if err != nil {
			return 0, err
		}
		var old []*x509.Certificate
		if s != nil {
			old = s.cas
		}
		logger.Info("Creating the serving CA and certificate", "ca", fingerprint(ca.cert), "notAfter", leaf.cert.NotAfter)
		m.metrics.rotations.WithLabelValues("ca").Inc()
		m.metrics.rotations.WithLabelValues("certificate").Inc()
		return 0, m.write(ctx, s, bundle(now, ca.cert, old), &ca, &leaf)
	}
	// The CA's turn: a new one goes into the bundle first; the serving pair
	// stays until the new CA is trusted.
	if !now.Before(renewAt(s.signer.cert)) {
		ca, err := newCA(now, m.o.CAValidity, m.o.Name)
		if err != nil {
			return 0, err
		}
		logger.Info("Rotating the serving CA: the new one joins the bundle, the old one stays until it expires",
			"ca", fingerprint(ca.cert), "old", fingerprint(s.signer.cert), "oldNotAfter", s.signer.cert.NotAfter)
		m.metrics.rotations.WithLabelValues("ca").Inc()
		return 0, m.write(ctx, s, bundle(now, ca.cert, s.cas), &ca, nil)
	}
	if b := bundle(now, s.cas[0], s.cas[1:]); !slices.EqualFunc(b, s.cas, (*x509.Certificate).Equal) {
		logger.Info("Dropping expired CAs from the bundle", "kept", len(b), "was", len(s.cas))
		return 0, m.write(ctx, s, b, nil, nil)
	}
	want := encodeCerts(s.cas...)
	if ours && !bytes.Equal(api.Spec.CABundle, want) {
		// Someone else's, not our previous bundle before a CA rotation.
		if len(api.Spec.CABundle) > 0 && !bytes.Equal(api.Spec.CABundle, m.written) {
			if now.Sub(m.lastPutBack) > 10*time.Minute {
				m.putBacks = 0
			}
			if wait := m.lastPutBack.Add(min(time.Second<<max(m.putBacks-1, 0), 5*time.Minute)).Sub(now); m.putBacks > 0 && wait > 0 {
				logger.Info("Another writer keeps changing the APIService's caBundle; putting it back after a pause",
					"apiservice", api.Name, "pause", wait, "writers", caBundleWriters(api), "times", m.putBacks)
				return wait, nil
			}
			m.putBacks++
			m.lastPutBack = now
		}
		return 0, m.putCABundle(ctx, api, want, !bytes.Equal(api.Spec.CABundle, m.written))
	}
	if api != nil && !ours && m.o.OtherOwner != nil && api.ResourceVersion != m.otherSeen {
		if err := m.o.OtherOwner(ctx, api, want); err != nil {
			return 0, err
		}
		m.otherSeen = api.ResourceVersion
	}
	if api == nil && m.apisvcs != nil && m.o.Missing != nil {
		if err := m.o.Missing(ctx, want); err != nil {
			return 0, err
		}
	}
	next := renewAt(s.signer.cert).Sub(now)
	for _, c := range s.cas[1:] {
		next = min(next, c.NotAfter.Sub(now))
	}
	if s.leaf.cert == nil || !issuedBy(s.leaf.cert, s.signer.cert) || !now.Before(renewAt(s.leaf.cert)) ||
		!slices.Equal(s.leaf.cert.DNSNames, m.o.DNSNames) {
		if wait := m.untilTrusted(s.signer.cert, ours, now); wait > 0 {
			logger.V(2).Info("Waiting for the CA to be in the APIService's caBundle before issuing from it", "wait", wait)
			return wait, nil
		}
		leaf, err := newLeaf(now, m.o.CertValidity, m.o.DNSNames, s.signer)
		if err != nil {
			return 0, err
		}
		logger.Info("Issuing a new serving certificate", "ca", fingerprint(s.signer.cert), "notAfter", leaf.cert.NotAfter)
		m.metrics.rotations.WithLabelValues("certificate").Inc()
		return 0, m.write(ctx, s, s.cas, nil, &leaf)
	}
	m.metrics.notAfter.Set(float64(s.leaf.cert.NotAfter.Unix()))
	return max(min(next, renewAt(s.leaf.cert).Sub(now)), time.Second), nil
}

// bundle is ca followed by the others not yet expired (ca itself never twice).
func bundle(now time.Time, ca *x509.Certificate, others []*x509.Certificate) []*x509.Certificate {
	out := []*x509.Certificate{ca}
	for _, c := range others {
		if now.Before(c.NotAfter) && !c.Equal(ca) {
			out = append(out, c)
		}
	}
	return out
}

// write stores the bundle and, when given, a new signing CA and serving
// pair, as a compare-and-swap on the Secret read (nil: create it).
func (m *Manager) write(ctx context.Context, s *state, cas []*x509.Certificate, ca, leaf *pair) error {
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: m.o.SecretName, Namespace: m.o.Namespace,
			Labels:      map[string]string{"app.kubernetes.io/managed-by": "capscale-servingcert"},
			Annotations: map[string]string{"capscale.io/serving-cert": "made and rotated by capscale's metrics adapter; do not edit"}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{},
	}
	if s != nil {
		sec = s.secret.DeepCopy()
		if sec.Data == nil {
			sec.Data = map[string][]byte{}
		}
	}
	sec.Data[KeyCABundle] = encodeCerts(cas...)
	if ca != nil {
		k, err := encodeKey(ca.key)
		if err != nil {
			return err
		}
		sec.Data[KeyCAKey] = k
	}
	if leaf != nil {
		k, err := encodeKey(leaf.key)
		if err != nil {
			return err
		}
		sec.Data[KeyCert], sec.Data[KeyKey] = encodeCerts(leaf.cert), k
	}
	var err error
	if s == nil {
		_, err = m.kube.CoreV1().Secrets(m.o.Namespace).Create(ctx, sec, metav1.CreateOptions{FieldManager: "capscale-servingcert"})
	} else {
		_, err = m.kube.CoreV1().Secrets(m.o.Namespace).Update(ctx, sec, metav1.UpdateOptions{FieldManager: "capscale-servingcert"})
	}
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		// Another replica wrote first: its write comes back as an event.
		klog.FromContext(ctx).V(2).Info("Another writer changed the Secret first; reading it again")
		return nil
	}
	if err != nil {
		return fmt.Errorf("writing Secret %s/%s: %w", m.o.Namespace, m.o.SecretName, err)
	}
	return nil
}

// apiService returns the watched APIService and whether it routes to
// capscale's Service (only then is its caBundle capscale's to keep).
func (m *Manager) apiService() (*apiregv1.APIService, bool) {
	if m.apisvcs == nil {
		return nil, false
	}
	obj, ok, err := m.apisvcs.GetStore().GetByKey(m.o.APIService)
	if err != nil || !ok {
		return nil, false
	}
	api := obj.(*apiregv1.APIService)
	s := api.Spec.Service
	return api, s != nil && s.Namespace == m.o.Service.Namespace && s.Name == m.o.Service.Name
}

// putCABundle writes want into the APIService's caBundle: at install, after a
// CA rotation, and when someone else changed it.
func (m *Manager) putCABundle(ctx context.Context, api *apiregv1.APIService, want []byte, someoneElse bool) error {
	logger := klog.FromContext(ctx)
	if len(api.Spec.CABundle) > 0 && someoneElse {
		logger.Info("Putting capscale's CA bundle back into the APIService's caBundle", "apiservice", api.Name,
			"had", describeBundle(api.Spec.CABundle), "writers", caBundleWriters(api))
		m.metrics.caBundleWrites.Inc()
	} else {
		logger.Info("Writing the APIService's caBundle", "apiservice", api.Name, "cas", describeBundle(want))
	}
	api = api.DeepCopy()
	api.Spec.CABundle = want
	// caBundle and insecureSkipTLSVerify=true are exclusive.
	api.Spec.InsecureSkipTLSVerify = false
	_, err := m.api.ApiregistrationV1().APIServices().Update(ctx, api, metav1.UpdateOptions{FieldManager: "capscale-servingcert"})
	if apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("writing the caBundle of APIService %s: %w", api.Name, err)
	}
	m.written = want
	return nil
}

// caBundleWriters names the field managers, other than capscale's, that
// own spec.caBundle (who wrote it: keda-operator, cainjector, ...).
func caBundleWriters(api *apiregv1.APIService) []string {
	var out []string
	for _, f := range api.ManagedFields {
		if f.Manager != "capscale-servingcert" && f.FieldsV1 != nil && bytes.Contains(f.FieldsV1.GetRawBytes(), []byte(`"f:caBundle"`)) {
			out = append(out, f.Manager)
		}
	}
	return out
}

func describeBundle(b []byte) string {
	certs, err := parseCerts(b)
	if err != nil {
		return "not PEM certificates"
	}
	var s []string
	for _, c := range certs {
		s = append(s, c.Subject.CommonName+" "+fingerprint(c))
	}
	return fmt.Sprint(s)
}

// observeTrust records when each CA of the APIService's caBundle was first
// seen there (only while the APIService is capscale's).
func (m *Manager) observeTrust(api *apiregv1.APIService, ours bool, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[string]bool{}
	if ours {
		if certs, err := parseCerts(api.Spec.CABundle); err == nil {
			for _, c := range certs {
				fp := fingerprint(c)
				seen[fp] = true
				if _, ok := m.trustedSince[fp]; !ok {
					m.trustedSince[fp] = now
				}
			}
		}
	}
	for fp := range m.trustedSince {
		if !seen[fp] {
			delete(m.trustedSince, fp)
		}
	}
}

// untilTrusted is how long until a certificate signed by ca may be issued
// or served: 0 when there is no APIService of capscale's to wait for.
func (m *Manager) untilTrusted(ca *x509.Certificate, ours bool, now time.Time) time.Duration {
	if m.apisvcs == nil || !ours {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	since, ok := m.trustedSince[fingerprint(ca)]
	if !ok {
		// Not in the caBundle yet: the caBundle write brings an event.
		return m.o.PropagationDelay + time.Second
	}
	return max(since.Add(m.o.PropagationDelay).Sub(now), 0)
}

// refreshServing hands the Secret's serving pair to the TLS servers when
// the CA that signed it is trusted (or nothing is served yet).
func (m *Manager) refreshServing(ctx context.Context) {
	s, err := m.read()
	if err != nil || s == nil || s.leaf.cert == nil {
		return
	}
	api, ours := m.apiService()
	now := m.o.Clock.Now()
	if m.serving.has() && ours {
		var issuer *x509.Certificate
		if certs, err := parseCerts(api.Spec.CABundle); err == nil {
			for _, c := range certs {
				if issuedBy(s.leaf.cert, c) {
					issuer = c
				}
			}
		}
		if issuer == nil {
			return
		}
		if wait := m.untilTrusted(issuer, ours, now); wait > 0 {
			// Look again when it is due.
			go func() {
				select {
				case <-ctx.Done():
				case <-m.o.Clock.After(wait):
					m.kick()
				}
			}()
			return
		}
	}
	if m.serving.set(s.secret.Data[KeyCert], s.secret.Data[KeyKey]) {
		klog.FromContext(ctx).Info("Serving a new certificate", "fingerprint", fingerprint(s.leaf.cert), "notAfter", s.leaf.cert.NotAfter)
		m.metrics.notAfter.Set(float64(s.leaf.cert.NotAfter.Unix()))
	}
}

// tlsCertificate parses a PEM pair for crypto/tls.
func tlsCertificate(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	return &c, nil
}
