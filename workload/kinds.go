package workload

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/capscale/capscale/internal/names"
)

// workloadObject is what the API reads and writes of one workload, whatever its
// kind. The pointers alias the typed object, so a change made through them
// is what update sends.
type workloadObject struct {
	meta *metav1.ObjectMeta
	// replicas is nil for a kind without a replica count (DaemonSet).
	replicas **int32
	template *corev1.PodTemplateSpec
	paused   bool
	rollout  func() RolloutStatus
	// update writes the object back with the client it was read with,
	// guarded by its resourceVersion; nil for a cached object.
	update func(ctx context.Context) error
}

// kind is one workload resource the API serves. Its methods hide the typed
// clients, so that the handlers have no per-kind switch.
type kind interface {
	// resource is the URL and RBAC name, e.g. "deployments"; kind the Kind,
	// as an HPA's scaleTargetRef names it.
	resource() string
	kind() string
	// scalable kinds have a replica count and a scale subresource.
	scalable() bool
	get(ctx context.Context, c kubernetes.Interface, ns, name string) (*workloadObject, error)
	patch(ctx context.Context, c kubernetes.Interface, ns, name string, pt types.PatchType, data []byte) (*workloadObject, error)
	// cached reads the object from the API's informers.
	cached(s *Server, ns, name string) (*workloadObject, error)
	getScale(ctx context.Context, c kubernetes.Interface, ns, name string) (*autoscalingv1.Scale, error)
	updateScale(ctx context.Context, c kubernetes.Interface, ns string, sc *autoscalingv1.Scale) (*autoscalingv1.Scale, error)
}

// typedClient is what the API uses of a generated client for T.
type typedClient[T any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
}

// scaleClient is the scale subresource of a generated client.
type scaleClient interface {
	GetScale(ctx context.Context, name string, opts metav1.GetOptions) (*autoscalingv1.Scale, error)
	UpdateScale(ctx context.Context, name string, scale *autoscalingv1.Scale, opts metav1.UpdateOptions) (*autoscalingv1.Scale, error)
}

// kindOf implements kind for the typed object T.
type kindOf[T any] struct {
	res, knd string
	client   func(c kubernetes.Interface, ns string) typedClient[T]
	// scales is nil for a kind without the scale subresource.
	scales func(c kubernetes.Interface, ns string) scaleClient
	// lister reads the API's own informer cache; nil for a kind it does
	// not cache.
	lister func(s *Server, ns, name string) (T, error)
	// view returns the parts of an object the API reads and writes; it must
	// not copy, so that writes through them reach the object.
	view func(T) *workloadObject
}

func (k *kindOf[T]) resource() string { return k.res }
func (k *kindOf[T]) kind() string     { return k.knd }
func (k *kindOf[T]) scalable() bool   { return k.scales != nil }

func (k *kindOf[T]) wrap(c typedClient[T], o T) *workloadObject {
	v := k.view(o)
	v.update = func(ctx context.Context) error {
		_, err := c.Update(ctx, o, metav1.UpdateOptions{FieldManager: names.FieldManager})
		return err
	}
	return v
}

func (k *kindOf[T]) get(ctx context.Context, c kubernetes.Interface, ns, name string) (*workloadObject, error) {
	tc := k.client(c, ns)
	o, err := tc.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return k.wrap(tc, o), nil
}

func (k *kindOf[T]) patch(ctx context.Context, c kubernetes.Interface, ns, name string, pt types.PatchType, data []byte) (*workloadObject, error) {
	tc := k.client(c, ns)
	o, err := tc.Patch(ctx, name, pt, data, metav1.PatchOptions{FieldManager: names.FieldManager})
	if err != nil {
		return nil, err
	}
	return k.wrap(tc, o), nil
}

func (k *kindOf[T]) cached(s *Server, ns, name string) (*workloadObject, error) {
	if k.lister == nil {
		return nil, fmt.Errorf("the API does not cache %s", k.res)
	}
	o, err := k.lister(s, ns, name)
	if err != nil {
		return nil, err
	}
	return k.view(o), nil
}

func (k *kindOf[T]) getScale(ctx context.Context, c kubernetes.Interface, ns, name string) (*autoscalingv1.Scale, error) {
	if k.scales == nil {
		return nil, fmt.Errorf("resource %q cannot be scaled", k.res)
	}
	return k.scales(c, ns).GetScale(ctx, name, metav1.GetOptions{})
}

func (k *kindOf[T]) updateScale(ctx context.Context, c kubernetes.Interface, ns string, sc *autoscalingv1.Scale) (*autoscalingv1.Scale, error) {
	if k.scales == nil {
		return nil, fmt.Errorf("resource %q cannot be scaled", k.res)
	}
	return k.scales(c, ns).UpdateScale(ctx, sc.Name, sc, metav1.UpdateOptions{FieldManager: names.FieldManager})
}

var (
	deploymentKind kind = &kindOf[*appsv1.Deployment]{
		res: "deployments", knd: "Deployment",
		client: func(c kubernetes.Interface, ns string) typedClient[*appsv1.Deployment] {
			return c.AppsV1().Deployments(ns)
		},
		scales: func(c kubernetes.Interface, ns string) scaleClient { return c.AppsV1().Deployments(ns) },
		lister: func(s *Server, ns, name string) (*appsv1.Deployment, error) {
			return s.deployments.Deployments(ns).Get(name)
		},
		view: func(d *appsv1.Deployment) *workloadObject {
			return &workloadObject{meta: &d.ObjectMeta, replicas: &d.Spec.Replicas, template: &d.Spec.Template, paused: d.Spec.Paused,
				rollout: func() RolloutStatus { return deploymentRollout(d) }}
		},
	}
	statefulSetKind kind = &kindOf[*appsv1.StatefulSet]{
		res: "statefulsets", knd: "StatefulSet",
		client: func(c kubernetes.Interface, ns string) typedClient[*appsv1.StatefulSet] {
			return c.AppsV1().StatefulSets(ns)
		},
		scales: func(c kubernetes.Interface, ns string) scaleClient { return c.AppsV1().StatefulSets(ns) },
		lister: func(s *Server, ns, name string) (*appsv1.StatefulSet, error) {
			return s.statefulsets.StatefulSets(ns).Get(name)
		},
		view: func(o *appsv1.StatefulSet) *workloadObject {
			return &workloadObject{meta: &o.ObjectMeta, replicas: &o.Spec.Replicas, template: &o.Spec.Template,
				rollout: func() RolloutStatus { return statefulSetRollout(o) }}
		},
	}
	daemonSetKind kind = &kindOf[*appsv1.DaemonSet]{
		res: "daemonsets", knd: "DaemonSet",
		client: func(c kubernetes.Interface, ns string) typedClient[*appsv1.DaemonSet] {
			return c.AppsV1().DaemonSets(ns)
		},
		view: func(o *appsv1.DaemonSet) *workloadObject {
			return &workloadObject{meta: &o.ObjectMeta, template: &o.Spec.Template,
				rollout: func() RolloutStatus { return daemonSetRollout(o) }}
		},
	}

	restartable = []kind{deploymentKind, statefulSetKind, daemonSetKind}
	scalable    = []kind{deploymentKind, statefulSetKind}
)

func lookupKind(resource string, allowed []kind) (kind, error) {
	names := make([]string, len(allowed))
	for i, k := range allowed {
		if k.resource() == resource {
			return k, nil
		}
		names[i] = k.resource()
	}
	return nil, fmt.Errorf("resource %q is not served here; use one of %s", resource, strings.Join(names, ", "))
}
