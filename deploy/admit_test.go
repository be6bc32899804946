package deploy

import (
	"context"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/apiserver/pkg/admission/plugin/policy/matching"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/openapi/openapitest"
	"k8s.io/client-go/tools/cache"
)

// admitter runs MutatingAdmissionPolicies on a pod CREATE with
// kube-apiserver's own code (k8s.io/apiserver v0.37.2): its matcher for
// matchConstraints (the namespaceSelector against the Namespace's labels),
// its CEL compiler and match-condition matcher, and its ApplyConfiguration
// patcher over Pod's OpenAPI schema. As mutating/dispatcher.go:139-275 does,
// the policies run one after another on one object, each seeing what the
// ones before it wrote, none re-run (reinvocationPolicy Never); the order
// is the caller's, since kube-apiserver's comes from ranging over a map
// (generic/policy_source.go:312).
type admitter struct {
	policies   []*admissionv1.MutatingAdmissionPolicy
	compiled   []compiledPolicy
	namespaces corev1listers.NamespaceLister
	matcher    generic.PolicyMatcher
	tc         managedfields.TypeConverter
	scheme     *runtime.Scheme
}

var (
	podGVK = corev1.SchemeGroupVersion.WithKind("Pod")
	podGVR = corev1.SchemeGroupVersion.WithResource("pods")
)

// newAdmitter loads the policies and the namespaces, each labelled
// kubernetes.io/metadata.name as kube-apiserver labels every Namespace.
func newAdmitter(t *testing.T, policies []*admissionv1.MutatingAdmissionPolicy, namespaces ...*corev1.Namespace) *admitter {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, ns := range namespaces {
		ns = ns.DeepCopy()
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		ns.Labels[corev1.LabelMetadataName] = ns.Name
		if err := idx.Add(ns); err != nil {
			t.Fatal(err)
		}
	}
	lister := corev1listers.NewNamespaceLister(idx)
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	compiled := make([]compiledPolicy, len(policies))
	for i, p := range policies {
		policies[i] = defaulted(p)
		compiled[i] = compilePolicy(t, policies[i])
	}
	return &admitter{
		policies:   policies,
		compiled:   compiled,
		namespaces: lister,
		matcher:    generic.NewPolicyMatcher(matching.NewMatcher(lister, nil)),
		tc:         podTypeConverter(t),
		scheme:     scheme,
	}
}

// defaulted is p as kube-apiserver stores it: the defaults of
// k8s.io/kubernetes v1.37.2 pkg/apis/admissionregistration/v1/defaults.go:106
// SetDefaults_MatchResources
// (every namespace, every object, matchPolicy Equivalent).
func defaulted(p *admissionv1.MutatingAdmissionPolicy) *admissionv1.MutatingAdmissionPolicy {
	p = p.DeepCopy()
	mc := p.Spec.MatchConstraints
	if mc == nil {
		return p
	}
	if mc.NamespaceSelector == nil {
		mc.NamespaceSelector = &metav1.LabelSelector{}
	}
	if mc.ObjectSelector == nil {
		mc.ObjectSelector = &metav1.LabelSelector{}
	}
	if mc.MatchPolicy == nil {
		equivalent := admissionv1.Equivalent
		mc.MatchPolicy = &equivalent
	}
	return p
}

// compiledPolicy is one policy compiled as mutating/compilation.go does.
type compiledPolicy struct {
	compiler *plugincel.CompositedCompiler
	matcher  matchconditions.Matcher
	patchers []patch.Patcher
}

func compilePolicy(t *testing.T, p *admissionv1.MutatingAdmissionPolicy) compiledPolicy {
	t.Helper()
	compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		t.Fatal(err)
	}
	opts := plugincel.OptionalVariableDeclarations{HasAuthorizer: true}
	compiler.CompileAndStoreVariables(nil, opts, environment.StoredExpressions)
	conditions := make([]plugincel.ExpressionAccessor, len(p.Spec.MatchConditions))
	for j := range p.Spec.MatchConditions {
		conditions[j] = (*matchconditions.MatchCondition)(&p.Spec.MatchConditions[j])
	}
	c := compiledPolicy{compiler: compiler}
	c.matcher = matchconditions.NewMatcher(compiler.CompileCondition(conditions, opts, environment.StoredExpressions), p.Spec.FailurePolicy, "policy", "validate", p.Name)
	popts := opts
	popts.HasPatchTypes = true
	for _, mu := range p.Spec.Mutations {
		if mu.PatchType != admissionv1.PatchTypeApplyConfiguration || mu.ApplyConfiguration == nil {
			t.Fatalf("%s: only ApplyConfiguration mutations are evaluated here", p.Name)
		}
		eval := compiler.CompileMutatingEvaluator(&patch.ApplyConfigurationCondition{Expression: mu.ApplyConfiguration.Expression}, popts, environment.StoredExpressions)
		c.patchers = append(c.patchers, patch.NewApplyConfigurationPatcher(eval))
	}
	return c
}

// podTypeConverter is Pod's structured-merge type converter from client-go's
// embedded OpenAPI documents, as apiserver's own patch tests build it.
func podTypeConverter(t *testing.T) managedfields.TypeConverter {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	m := patch.NewTypeConverterManager(nil, openapitest.NewEmbeddedFileClient())
	go m.Run(ctx)
	var tc managedfields.TypeConverter
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		tc = m.GetTypeConverter(podGVK)
		return tc != nil, nil
	}); err != nil {
		t.Fatalf("no type converter for Pod: %v", err)
	}
	return tc
}

// admit creates pod through the policies in the order order gives (indices
// into a.policies) and returns the pod as it would be stored.
func (a *admitter) admit(t *testing.T, pod *corev1.Pod, order []int) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	obj := pod.DeepCopy()
	obj.SetGroupVersionKind(podGVK)
	attrs := admission.NewAttributesRecord(obj, nil, podGVK, obj.Namespace, obj.Name, podGVR, "", admission.Create, &metav1.CreateOptions{}, false, nil)
	vattrs := &admission.VersionedAttributes{Attributes: attrs, VersionedKind: podGVK, VersionedObject: admission.NewLazyObject(obj)}
	ns, err := a.namespaces.Get(obj.Namespace)
	if err != nil {
		t.Fatalf("namespace %s: %v", obj.Namespace, err)
	}
	o := admission.NewObjectInterfacesFromScheme(a.scheme)
	for _, i := range order {
		p := a.policies[i]
		matches, _, _, err := a.matcher.DefinitionMatches(attrs, o, mutating.NewMutatingAdmissionPolicyAccessor(p))
		if err != nil {
			t.Fatalf("%s: matchConstraints: %v", p.Name, err)
		}
		if !matches {
			continue
		}
		c := a.compiled[i]
		pctx := c.compiler.CreateContext(ctx)
		r := c.matcher.Match(pctx, vattrs, nil, nil)
		if r.Error != nil {
			t.Fatalf("%s: matchConditions on %s/%s: %v", p.Name, pod.Namespace, pod.Name, r.Error)
		}
		if !r.Matches {
			continue
		}
		for _, patcher := range c.patchers {
			out, err := patcher.Patch(pctx, patch.Request{
				MatchedResource:     podGVR,
				VersionedAttributes: vattrs,
				ObjectInterfaces:    o,
				Namespace:           ns,
				TypeConverter:       a.tc,
			}, celconfig.RuntimeCELCostBudget)
			if err != nil {
				t.Fatalf("%s: mutating %s/%s: %v", p.Name, pod.Namespace, pod.Name, err)
			}
			if out, err = a.scheme.ConvertToVersion(out, corev1.SchemeGroupVersion); err != nil {
				t.Fatal(err)
			}
			vattrs.UpdateObject(out)
		}
	}
	got, ok := vattrs.VersionedObject.Object().(*corev1.Pod)
	if !ok {
		t.Fatalf("admitted object is a %T", vattrs.VersionedObject.Object())
	}
	return got
}

// permutations returns every order of 0..n-1.
func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := append(append(append([]int{}, p[:i]...), n-1), p[i:]...)
			out = append(out, q)
		}
	}
	return out
}
