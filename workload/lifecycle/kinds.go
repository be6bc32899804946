// Package lifecycle is what the workload API and kubectl-capscale do to a
// Deployment or StatefulSet (stop remembering replicas, start, scale, scale
// to the computed maximum, restart), as functions over a client that
// carries the caller's own identity. The decisions are plain functions
// (decide.go); the functions here read, decide and write, and return plain
// results, so that the HTTP handler and the kubectl command are thin edges
// over the same code.
package lifecycle

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

// Object is what lifecycle reads and writes of one workload, whatever its
// kind. The pointers alias the typed object, so a change made through them
// is what update sends.
type Object struct {
	Meta *metav1.ObjectMeta
	// Replicas is nil for a kind without a replica count (DaemonSet).
	Replicas **int32
	Template *corev1.PodTemplateSpec
	paused   bool
	rollout  func() RolloutStatus
	// update writes the object back with the client it was read with,
	// guarded by its resourceVersion; nil for an object not read by Get.
	update func(ctx context.Context) error
}

// Kind is one workload resource. Its methods hide the typed clients, so
// that callers have no per-kind switch.
type Kind interface {
	// Resource is the URL and RBAC name, e.g. "deployments"; Kind the Kind,
	// as an HPA's scaleTargetRef names it.
	Resource() string
	Kind() string
	// Scalable kinds have a replica count and a scale subresource.
	Scalable() bool
	// Get reads the object with c.
	Get(ctx context.Context, c kubernetes.Interface, ns, name string) (*Object, error)
	// List names the objects of this kind in ns that c may list.
	List(ctx context.Context, c kubernetes.Interface, ns string) ([]string, error)
	// View wraps an object of this kind read elsewhere (an informer's
	// cache): it can be read, not updated.
	View(obj any) (*Object, error)
	patch(ctx context.Context, c kubernetes.Interface, ns, name string, pt types.PatchType, data []byte) (*Object, error)
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
	// view returns the parts of an object the API reads and writes; it must
	// not copy, so that writes through them reach the object.
	view func(T) *Object
	// list names the objects in ns.
	list func(ctx context.Context, c kubernetes.Interface, ns string) ([]string, error)
}

func (k *kindOf[T]) List(ctx context.Context, c kubernetes.Interface, ns string) ([]string, error) {
	return k.list(ctx, c, ns)
}

// namesOf returns the names of items.
func namesOf[T any](items []T, meta func(*T) *metav1.ObjectMeta) []string {
	out := make([]string, len(items))
	for i := range items {
		out[i] = meta(&items[i]).Name
	}
	return out
}

func (k *kindOf[T]) Resource() string { return k.res }
func (k *kindOf[T]) Kind() string     { return k.knd }
func (k *kindOf[T]) Scalable() bool   { return k.scales != nil }

func (k *kindOf[T]) View(obj any) (*Object, error) {
	o, ok := obj.(T)
	if !ok {
		return nil, fmt.Errorf("%T is not a %s", obj, k.knd)
	}
	return k.view(o), nil
}

func (k *kindOf[T]) wrap(c typedClient[T], o T) *Object {
	v := k.view(o)
	v.update = func(ctx context.Context) error {
		_, err := c.Update(ctx, o, metav1.UpdateOptions{FieldManager: names.FieldManager})
		return err
	}
	return v
}

func (k *kindOf[T]) Get(ctx context.Context, c kubernetes.Interface, ns, name string) (*Object, error) {
	tc := k.client(c, ns)
	o, err := tc.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return k.wrap(tc, o), nil
}

func (k *kindOf[T]) patch(ctx context.Context, c kubernetes.Interface, ns, name string, pt types.PatchType, data []byte) (*Object, error) {
	tc := k.client(c, ns)
	o, err := tc.Patch(ctx, name, pt, data, metav1.PatchOptions{FieldManager: names.FieldManager})
	if err != nil {
		return nil, err
	}
	return k.wrap(tc, o), nil
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
	// Deployments, StatefulSets and DaemonSets are the kinds served.
	Deployments Kind = &kindOf[*appsv1.Deployment]{
		res: "deployments", knd: "Deployment",
		list: func(ctx context.Context, c kubernetes.Interface, ns string) ([]string, error) {
			l, err := c.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			return namesOf(l.Items, func(o *appsv1.Deployment) *metav1.ObjectMeta { return &o.ObjectMeta }), nil
		},
		client: func(c kubernetes.Interface, ns string) typedClient[*appsv1.Deployment] {
			return c.AppsV1().Deployments(ns)
		},
		scales: func(c kubernetes.Interface, ns string) scaleClient { return c.AppsV1().Deployments(ns) },
		view: func(d *appsv1.Deployment) *Object {
			return &Object{Meta: &d.ObjectMeta, Replicas: &d.Spec.Replicas, Template: &d.Spec.Template, paused: d.Spec.Paused,
				rollout: func() RolloutStatus { return deploymentRollout(d) }}
		},
	}
	StatefulSets Kind = &kindOf[*appsv1.StatefulSet]{
		res: "statefulsets", knd: "StatefulSet",
		list: func(ctx context.Context, c kubernetes.Interface, ns string) ([]string, error) {
			l, err := c.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			return namesOf(l.Items, func(o *appsv1.StatefulSet) *metav1.ObjectMeta { return &o.ObjectMeta }), nil
		},
		client: func(c kubernetes.Interface, ns string) typedClient[*appsv1.StatefulSet] {
			return c.AppsV1().StatefulSets(ns)
		},
		scales: func(c kubernetes.Interface, ns string) scaleClient { return c.AppsV1().StatefulSets(ns) },
		view: func(o *appsv1.StatefulSet) *Object {
			return &Object{Meta: &o.ObjectMeta, Replicas: &o.Spec.Replicas, Template: &o.Spec.Template,
				rollout: func() RolloutStatus { return statefulSetRollout(o) }}
		},
	}
	DaemonSets Kind = &kindOf[*appsv1.DaemonSet]{
		res: "daemonsets", knd: "DaemonSet",
		list: func(ctx context.Context, c kubernetes.Interface, ns string) ([]string, error) {
			l, err := c.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			return namesOf(l.Items, func(o *appsv1.DaemonSet) *metav1.ObjectMeta { return &o.ObjectMeta }), nil
		},
		client: func(c kubernetes.Interface, ns string) typedClient[*appsv1.DaemonSet] {
			return c.AppsV1().DaemonSets(ns)
		},
		view: func(o *appsv1.DaemonSet) *Object {
			return &Object{Meta: &o.ObjectMeta, Template: &o.Spec.Template,
				rollout: func() RolloutStatus { return daemonSetRollout(o) }}
		},
	}

	// Restartable kinds can be restarted and report a rollout; Scalable
	// ones also stop, start and scale.
	Restartable = []Kind{Deployments, StatefulSets, DaemonSets}
	Scalable    = []Kind{Deployments, StatefulSets}
)

// Lookup returns the kind of allowed whose Resource is resource, or an
// error naming the ones there are.
func Lookup(resource string, allowed []Kind) (Kind, error) {
	names := make([]string, len(allowed))
	for i, k := range allowed {
		if k.Resource() == resource {
			return k, nil
		}
		names[i] = k.Resource()
	}
	return nil, fmt.Errorf("resource %q is not served here; use one of %s", resource, strings.Join(names, ", "))
}
