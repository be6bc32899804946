package apiservice

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset/fake"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/internal/names"
)

var kedaSpec = apiregv1.APIServiceSpec{
	Service: &apiregv1.ServiceReference{Namespace: "keda", Name: "keda-operator-metrics-apiserver", Port: ptr.To(int32(443))},
	Group:   "external.metrics.k8s.io", Version: "v1beta1", CABundle: []byte("KEDA-CA"),
	GroupPriorityMinimum: 100, VersionPriority: 100,
}

func kedaAPIService() *apiregv1.APIService {
	return &apiregv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: Name, ResourceVersion: "1"}, Spec: *kedaSpec.DeepCopy()}
}

// TestDelegateTakeOverRestore walks the whole life: record KEDA, take over
// (Helm style), re-run (record kept, capscale never recorded), restore
// (KEDA's spec back exactly, record gone), restore again (nothing).
func TestDelegateTakeOverRestore(t *testing.T) {
	c := fake.NewSimpleClientset(kedaAPIService())
	api := c.ApiregistrationV1()
	ctx := context.Background()
	opts := DelegateOptions{Ours: capscale, TakeOverCA: []byte("CAPSCALE-CA")}
	plan := func(a *apiregv1.APIService) (Plan, error) { return PlanDelegate(a, opts) }

	p, err := Apply(ctx, api, false, plan)
	if err != nil || !strings.Contains(p.Message, "recorded keda/keda-operator-metrics-apiserver:443 as the delegate") {
		t.Fatalf("delegate: %+v, %v", p, err)
	}
	got, _ := api.APIServices().Get(ctx, Name, metav1.GetOptions{})
	if s := got.Spec.Service; s.Namespace != capscale.Namespace || s.Name != capscale.Name || string(got.Spec.CABundle) != "CAPSCALE-CA" {
		t.Errorf("after take-over the APIService routes to %+v with caBundle %q", s, got.Spec.CABundle)
	}
	rec, err := ParseRecord(got)
	if err != nil || rec == nil || rec.Target().String() != "keda/keda-operator-metrics-apiserver:443" || string(rec.Target().CABundle) != "KEDA-CA" {
		t.Fatalf("record = %+v, %v", rec, err)
	}
	before := got.Annotations[names.DelegateAnnotation]

	// A re-run keeps the record: capscale is never its own delegate.
	if p, err = Apply(ctx, api, false, plan); err != nil || p.Update != nil || !strings.Contains(p.Message, "delegates to keda/keda-operator-metrics-apiserver:443") {
		t.Fatalf("re-run: %+v, %v", p, err)
	}
	got, _ = api.APIServices().Get(ctx, Name, metav1.GetOptions{})
	if got.Annotations[names.DelegateAnnotation] != before {
		t.Errorf("a re-run changed the record")
	}

	restore := func(a *apiregv1.APIService) (Plan, error) { return PlanRestore(a, capscale, "") }
	if p, err = Apply(ctx, api, false, restore); err != nil || !p.Restored {
		t.Fatalf("restore: %+v, %v", p, err)
	}
	got, _ = api.APIServices().Get(ctx, Name, metav1.GetOptions{})
	if _, ok := got.Annotations[names.DelegateAnnotation]; ok || !apiequal(got.Spec, kedaSpec) {
		t.Errorf("after restore: annotations %v spec %+v, want KEDA's spec and no record", got.Annotations, got.Spec)
	}
	if p, err = Apply(ctx, api, false, restore); err != nil || p.Update != nil || !strings.Contains(p.Message, "nothing to restore") {
		t.Errorf("second restore: %+v, %v", p, err)
	}
}

// TestRestoredNotTakenBackByItsOwnInstall: helm uninstall's hook gives the
// APIService back while the install's adapters still run (Helm deletes them
// after its pre-delete hooks), and any of them may restart after that (OOM,
// liveness, a rollout still running). No adapter of that install may take
// it back — else the APIService routes to a Service about to be deleted —
// while a new install (another identity) takes it over, and preflight (no
// identity) always may.
func TestRestoredNotTakenBackByItsOwnInstall(t *testing.T) {
	c := fake.NewSimpleClientset(kedaAPIService())
	api := c.ApiregistrationV1()
	ctx := context.Background()
	const install, next = "uid-of-install-1", "uid-of-install-2"
	take := func(installation string) func(*apiregv1.APIService) (Plan, error) {
		return func(a *apiregv1.APIService) (Plan, error) {
			return PlanDelegate(a, DelegateOptions{Ours: capscale, TakeOverCA: []byte("CAPSCALE-CA"), Installation: installation})
		}
	}
	if _, err := Apply(ctx, api, false, take(install)); err != nil {
		t.Fatal(err)
	}
	if p, err := Apply(ctx, api, false, func(a *apiregv1.APIService) (Plan, error) { return PlanRestore(a, capscale, install) }); err != nil || !p.Restored {
		t.Fatalf("restore: %+v, %v", p, err)
	}
	got, _ := api.APIServices().Get(ctx, Name, metav1.GetOptions{})
	if got.Annotations[names.ReleasedAnnotation] != install {
		t.Fatalf("the restore marked %q, want the install that gave the APIService back (%q)", got.Annotations[names.ReleasedAnnotation], install)
	}

	// An adapter of the install being removed, whenever it (re)started:
	// before the mark or after it, the decision is the same.
	for i := range 3 {
		p, err := Apply(ctx, api, false, take(install))
		if err != nil || p.Update != nil || !strings.Contains(p.Message, "not taking it over again") {
			t.Errorf("start %d of an adapter of the install that gave the APIService back: %+v, %v; want it left alone", i, p, err)
		}
	}
	if got, _ := api.APIServices().Get(ctx, Name, metav1.GetOptions{}); !apiequal(got.Spec, kedaSpec) {
		t.Fatalf("the old install's adapter took the APIService back: %+v", got.Spec)
	}

	// A new install, an operator's preflight, or a mark of the old format
	// (a time): taken over, the mark gone.
	for _, tc := range []struct{ name, mark, installation string }{
		{"new install", install, next},
		{"preflight", install, ""},
		{"old time mark", "2026-11-01T10:00:00.123456789Z", install},
	} {
		a := got.DeepCopy()
		a.Annotations[names.ReleasedAnnotation] = tc.mark
		p, err := Apply(ctx, fake.NewSimpleClientset(a).ApiregistrationV1(), false, take(tc.installation))
		if err != nil || p.Update == nil {
			t.Fatalf("%s: %+v, %v; want the APIService taken over", tc.name, p, err)
		}
		if _, ok := p.Update.Annotations[names.ReleasedAnnotation]; ok {
			t.Errorf("%s: the take-over kept the release mark", tc.name)
		}
	}
}

func apiequal(a, b apiregv1.APIServiceSpec) bool {
	return a.Service.Namespace == b.Service.Namespace && a.Service.Name == b.Service.Name && *a.Service.Port == *b.Service.Port &&
		string(a.CABundle) == string(b.CABundle) && a.InsecureSkipTLSVerify == b.InsecureSkipTLSVerify &&
		a.GroupPriorityMinimum == b.GroupPriorityMinimum && a.VersionPriority == b.VersionPriority
}

func TestPlanDelegateCases(t *testing.T) {
	insecure := kedaAPIService()
	insecure.Spec.CABundle, insecure.Spec.InsecureSkipTLSVerify = nil, true
	local := kedaAPIService()
	local.Spec.Service = nil
	tests := []struct {
		name       string
		api        *apiregv1.APIService
		delegateCA []byte
		wantWrite  bool
		want       string
		wantErr    string
	}{
		{name: "absent", want: "no owner to delegate to"},
		{name: "record only", api: kedaAPIService(), wantWrite: true, want: "recorded"},
		{name: "insecure owner without a CA", api: insecure, wantErr: "--delegate-ca-file"},
		{name: "insecure owner with a CA", api: insecure, delegateCA: []byte("GIVEN-CA"), wantWrite: true, want: "recorded"},
		{name: "local APIService", api: local, wantErr: "kube-apiserver itself"},
		{name: "capscale without a record", api: &apiregv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: Name},
			Spec: apiregv1.APIServiceSpec{Service: &apiregv1.ServiceReference{Namespace: capscale.Namespace, Name: capscale.Name}}}, want: "no delegate is recorded"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := PlanDelegate(tc.api, DelegateOptions{Ours: capscale, DelegateCA: tc.delegateCA})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("PlanDelegate = %+v, %v; want error %q", p, err, tc.wantErr)
				}
				return
			}
			if err != nil || (p.Update != nil) != tc.wantWrite || !strings.Contains(p.Message, tc.want) {
				t.Fatalf("PlanDelegate = %+v, %v; want write=%v, message %q", p, err, tc.wantWrite, tc.want)
			}
			if p.Update != nil {
				if p.Update.Spec.Service.Name != tc.api.Spec.Service.Name {
					t.Errorf("record-only changed the route to %+v", p.Update.Spec.Service)
				}
				rec, err := ParseRecord(p.Update)
				if err != nil || rec == nil || len(rec.Target().CABundle) == 0 {
					t.Errorf("record %+v, %v", rec, err)
				}
				if tc.delegateCA != nil && (string(rec.Target().CABundle) != "GIVEN-CA" || !rec.Spec.InsecureSkipTLSVerify) {
					t.Errorf("record must verify with the given CA and restore insecureSkipTLSVerify: %+v", rec)
				}
			}
		})
	}
}

func TestParseRecordRejectsBadRecords(t *testing.T) {
	for _, raw := range []string{`{`, `{"spec":{}}`, `{"spec":{"service":{"namespace":"keda","name":"m"}}}`} {
		api := &apiregv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: Name, Annotations: map[string]string{names.DelegateAnnotation: raw}}}
		if rec, err := ParseRecord(api); err == nil {
			t.Errorf("ParseRecord(%s) = %+v, want an error", raw, rec)
		}
	}
}

func TestPlanRestoreLeavesOthersAlone(t *testing.T) {
	api := kedaAPIService()
	p, err := PlanDelegate(api, DelegateOptions{Ours: capscale})
	if err != nil {
		t.Fatal(err)
	}
	// Recorded, but the APIService still routes to KEDA (or KEDA took it
	// back): restore must not write.
	if p, err := PlanRestore(p.Update, capscale, ""); err != nil || p.Update != nil || !strings.Contains(p.Message, "no longer routes") {
		t.Errorf("PlanRestore = %+v, %v", p, err)
	}
}

// TestDelegateWarnsOfKEDARotation: recording KEDA's metrics server warns
// that KEDA's operator writes its CA over capscale's caBundle unless its
// APIService patching is off (TestRealKEDACertRotation shows both); another
// owner gets no such warning.
func TestDelegateWarnsOfKEDARotation(t *testing.T) {
	for _, tc := range []struct {
		name string
		api  *apiregv1.APIService
		warn bool
	}{
		{name: "KEDA's chart", api: kedaAPIService(), warn: true},
		{name: "KEDA's config/, by label", api: func() *apiregv1.APIService {
			a := kedaAPIService()
			a.Spec.Service.Name = "metrics"
			a.Labels = map[string]string{"app.kubernetes.io/part-of": "keda-operator"}
			return a
		}(), warn: true},
		{name: "prometheus-adapter", api: func() *apiregv1.APIService {
			a := kedaAPIService()
			a.Spec.Service.Namespace, a.Spec.Service.Name = "monitoring", "prometheus-adapter"
			return a
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := PlanDelegate(tc.api, DelegateOptions{Ours: capscale})
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(p.Message, "--enable-apiservice-patching=false"); got != tc.warn {
				t.Errorf("warning given = %v, want %v:\n%s", got, tc.warn, p.Message)
			}
		})
	}
}
