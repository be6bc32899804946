package elasticweb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	autoscalinglisters "k8s.io/client-go/listers/autoscaling/v2"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/csaupgrade"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	v1alpha1 "github.com/capscale/capscale/apis/capscale/v1alpha1"
	"github.com/capscale/capscale/internal/kube"
	"github.com/capscale/capscale/internal/names"
)

// Config wires a Controller.
type Config struct {
	Client   kubernetes.Interface
	Dynamic  dynamic.Interface
	Recorder record.EventRecorder
	Metrics  *Metrics
	// Workers reconcile different ElasticWebs in parallel; default 2.
	Workers int
	// MaxRetryDelay caps the backoff of a failing ElasticWeb (an object in
	// the way produces no event when it goes away); default 1 minute.
	MaxRetryDelay time.Duration
}

// Controller reconciles ElasticWebs.
type Controller struct {
	cfg Config

	ewFactory   dynamicinformer.DynamicSharedInformerFactory
	ewInformer  cache.SharedIndexInformer
	factory     informers.SharedInformerFactory
	deployments appslisters.DeploymentLister
	services    corelisters.ServiceLister
	hpas        autoscalinglisters.HorizontalPodAutoscalerLister
	synced      []cache.InformerSynced
	queue       workqueue.TypedRateLimitingInterface[string]

	now       func() metav1.Time
	syncedMu  sync.Mutex
	hasSynced bool
}

// errConflict marks a reconcile that left an object alone because it is not
// ours; it is retried with backoff but is not a failure of the controller.
var errConflict = errors.New("an object of the ElasticWeb's name is not its own")

// New builds the controller and its informers. The Deployment, Service and
// HPA informers see only objects labelled capscale.io/elasticweb, and keep
// managedFields: they tell which fields capscale owns.
func New(cfg Config) (*Controller, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	if cfg.MaxRetryDelay <= 0 {
		cfg.MaxRetryDelay = time.Minute
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	c := &Controller{cfg: cfg, now: metav1.Now}
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedMaxOfRateLimiter(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](50*time.Millisecond, cfg.MaxRetryDelay),
			&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
		),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "elasticweb"})

	c.ewFactory = dynamicinformer.NewDynamicSharedInformerFactory(cfg.Dynamic, 0)
	c.ewInformer = c.ewFactory.ForResource(v1alpha1.ElasticWebResource).Informer()
	if err := c.ewInformer.SetTransform(kube.DropManagedFields); err != nil {
		return nil, err
	}
	c.factory = informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = names.ElasticWebLabel }))
	dep := c.factory.Apps().V1().Deployments()
	svc := c.factory.Core().V1().Services()
	hpa := c.factory.Autoscaling().V2().HorizontalPodAutoscalers()
	c.deployments, c.services, c.hpas = dep.Lister(), svc.Lister(), hpa.Lister()

	ewHandler := cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueObject,
		UpdateFunc: func(_, n any) { c.enqueueObject(n) },
		DeleteFunc: c.enqueueObject,
	}
	childHandler := cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueOwner,
		// Both: a changed label or owner must wake the old and the new.
		UpdateFunc: func(o, n any) { c.enqueueOwner(o); c.enqueueOwner(n) },
		DeleteFunc: c.enqueueOwner,
	}
	for _, inf := range []cache.SharedIndexInformer{c.ewInformer, dep.Informer(), svc.Informer(), hpa.Informer()} {
		h := childHandler
		if inf == c.ewInformer {
			h = ewHandler
		}
		reg, err := inf.AddEventHandler(h)
		if err != nil {
			return nil, err
		}
		c.synced = append(c.synced, reg.HasSynced)
	}
	return c, nil
}

func (c *Controller) enqueueObject(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		klog.ErrorS(err, "Cannot key an ElasticWeb event")
		return
	}
	c.queue.Add(key)
}

// enqueueOwner wakes the ElasticWeb that controls obj, and the one its label
// names (an object in the way of an ElasticWeb carries no owner of it).
func (c *Controller) enqueueOwner(obj any) {
	m, ok := kube.Deleted(obj).(metav1.Object)
	if !ok {
		return
	}
	if ref := metav1.GetControllerOf(m); ref != nil && ref.Kind == v1alpha1.ElasticWebKind && strings.HasPrefix(ref.APIVersion, v1alpha1.GroupName+"/") {
		c.queue.Add(m.GetNamespace() + "/" + ref.Name)
	}
	if n := m.GetLabels()[names.ElasticWebLabel]; n != "" {
		c.queue.Add(m.GetNamespace() + "/" + n)
	}
}

// HasSynced reports whether the informers have synced since Run started.
func (c *Controller) HasSynced() bool {
	c.syncedMu.Lock()
	defer c.syncedMu.Unlock()
	return c.hasSynced
}

// Run starts the informers, waits for them and reconciles until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	c.ewFactory.Start(ctx.Done())
	c.factory.Start(ctx.Done())
	defer c.factory.Shutdown()
	defer c.ewFactory.Shutdown()
	klog.InfoS("Waiting for informers", "controller", "elasticweb")
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("elasticweb informers did not sync: %w", ctx.Err())
	}
	c.syncedMu.Lock()
	c.hasSynced = true
	c.syncedMu.Unlock()
	klog.InfoS("Informers synced; reconciling", "controller", "elasticweb", "workers", c.cfg.Workers)
	kube.RunWorkers(ctx, c.cfg.Workers, c.worker, c.queue)
	return nil
}

func (c *Controller) worker(ctx context.Context) {
	for c.processNext(ctx) {
	}
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	start := time.Now()
	err := c.reconcile(ctx, key)
	c.cfg.Metrics.observe(err, time.Since(start))
	switch {
	case err == nil:
		c.queue.Forget(key)
	case errors.Is(err, errConflict):
		c.queue.AddRateLimited(key)
	default:
		klog.ErrorS(err, "Reconciling ElasticWeb failed; retrying", "elasticweb", key, "retries", c.queue.NumRequeues(key))
		c.queue.AddRateLimited(key)
	}
	return true
}

// reconcile brings one ElasticWeb's objects and status in line with its spec.
func (c *Controller) reconcile(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	obj, exists, err := c.ewInformer.GetIndexer().GetByKey(key)
	if err != nil {
		return err
	}
	if !exists {
		// Deleted: the garbage collector removes what it owned.
		return nil
	}
	ew := &v1alpha1.ElasticWeb{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).UnstructuredContent(), ew); err != nil {
		return fmt.Errorf("decoding ElasticWeb %s: %w", key, err)
	}
	if ew.DeletionTimestamp != nil {
		return nil
	}
	obs := Observed{ElasticWeb: ew}
	if obs.Deployment, err = c.deployments.Deployments(ns).Get(name); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if obs.Service, err = c.services.Services(ns).Get(name); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if obs.HPA, err = c.hpas.HorizontalPodAutoscalers(ns).Get(name); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	plan, err := PlanFor(obs, c.now())
	if err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("elasticweb", klog.KObj(ew))
	if plan.Invalid != nil {
		c.cfg.Recorder.Event(ew, corev1.EventTypeWarning, v1alpha1.ReasonInvalidSpec, plan.Invalid.Error())
		return c.writeStatus(ctx, ew, &plan.Status)
	}

	var applyErrs []error
	conflict := false
	for _, ch := range plan.Children() {
		if ch.Action == ActionNone {
			continue
		}
		if ch.Action != ActionConflict {
			err := c.apply(ctx, ew, plan.Desired, ch)
			switch {
			case err == nil:
				c.cfg.Metrics.applied(ch.Kind, ch.Action)
				logger.V(2).Info("Applied", "kind", ch.Kind, "action", ch.Action)
				c.cfg.Recorder.Event(ew, corev1.EventTypeNormal, appliedReason(ch.Action), appliedMessage(ew, ch))
				continue
			case ch.Action == ActionConflict:
				// apply found an object the cache had not shown.
			default:
				applyErrs = append(applyErrs, err)
				c.cfg.Recorder.Event(ew, corev1.EventTypeWarning, v1alpha1.ReasonApplyFailed, err.Error())
				continue
			}
		}
		conflict = true
		c.cfg.Recorder.Event(ew, corev1.EventTypeWarning, v1alpha1.ReasonObjectConflict, ch.Message)
	}
	if conflict || len(applyErrs) > 0 {
		var msgs []string
		reason := v1alpha1.ReasonObjectConflict
		for _, ch := range plan.Children() {
			if ch.Action == ActionConflict {
				msgs = append(msgs, ch.Message)
			}
		}
		for _, e := range applyErrs {
			msgs = append(msgs, e.Error())
			reason = v1alpha1.ReasonApplyFailed
		}
		setCondition(&plan.Status, ew, c.now(), v1alpha1.ConditionReconciled, false, reason, strings.Join(msgs, "; "))
	}
	if err := c.writeStatus(ctx, ew, &plan.Status); err != nil {
		applyErrs = append(applyErrs, err)
	}
	if len(applyErrs) > 0 {
		return errors.Join(applyErrs...)
	}
	if conflict {
		return errConflict
	}
	return nil
}

func appliedReason(a Action) string {
	if a == ActionCreate {
		return "Created"
	}
	return "Updated"
}

func appliedMessage(ew *v1alpha1.ElasticWeb, ch *Child) string {
	if ch.Action == ActionCreate {
		return fmt.Sprintf("Created %s %s", ch.Kind, ew.Name)
	}
	if ew.Generation != ew.Status.ObservedGeneration {
		return fmt.Sprintf("Updated %s %s to generation %d of the spec", ch.Kind, ew.Name, ew.Generation)
	}
	return fmt.Sprintf("Reverted %s %s: fields capscale owns had been changed or removed", ch.Kind, ew.Name)
}

// apply writes one object. An update is a server-side apply carrying the
// object's metadata.uid: the apiserver refuses to change a uid, so the apply
// can never patch an object that replaced ours meanwhile. A create is a plain
// Create, which fails if any object of that name exists (apply would take it
// over); the fields it set are then handed to capscale's apply manager
// (csaupgrade) and applied once more, so that from then on capscale manages
// the object by server-side apply only. When the cache was wrong either way,
// apply reads the live object to tell "ours" from "not ours".
func (c *Controller) apply(ctx context.Context, ew *v1alpha1.ElasticWeb, d *Desired, ch *Child) error {
	if ch.Action == ActionCreate {
		created, err := c.create(ctx, ew, d, ch.Kind)
		switch {
		case err == nil:
			if err := c.upgradeToApply(ctx, ew, ch.Kind, created); err != nil {
				return err
			}
			return c.applyWithUID(ctx, ew, d, ch.Kind, created.GetUID())
		case !apierrors.IsAlreadyExists(err):
			return err
		}
	} else {
		// A Create whose hand-over did not happen (a crash in between).
		if ch.Existing != nil {
			if err := c.upgradeToApply(ctx, ew, ch.Kind, ch.Existing); err != nil {
				return err
			}
		}
		err := c.applyWithUID(ctx, ew, d, ch.Kind, ch.UID)
		if err == nil || !isUIDMismatch(err) {
			return err
		}
	}
	live, err := c.getLive(ctx, ew, ch.Kind)
	if err != nil {
		return fmt.Errorf("reading %s %s/%s: %w", ch.Kind, ew.Namespace, ew.Name, err)
	}
	if ref := metav1.GetControllerOf(live); ref == nil || ref.UID != ew.UID {
		ch.Action = ActionConflict
		ch.Message = conflictMessage(ch.Kind, live, ref)
		return errConflict
	}
	// Ours, but not as the cache showed it (its label was removed, or the
	// cache lagged): hand over any create-time fields, then apply.
	ch.Action = ActionUpdate
	if err := c.upgradeToApply(ctx, ew, ch.Kind, live); err != nil {
		return err
	}
	return c.applyWithUID(ctx, ew, d, ch.Kind, live.GetUID())
}

// isUIDMismatch recognises the apiserver's refusal of an apply whose uid is
// not the object's: 422 on metadata.uid when another object exists, 409
// "uid mismatch" when none does.
func isUIDMismatch(err error) bool {
	if apierrors.IsConflict(err) && strings.Contains(err.Error(), "uid mismatch") {
		return true
	}
	if !apierrors.IsInvalid(err) {
		return false
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) || st.Status().Details == nil {
		return false
	}
	for _, c := range st.Status().Details.Causes {
		if c.Field == "metadata.uid" {
			return true
		}
	}
	return false
}

// create makes the object from its apply configuration with a plain Create.
func (c *Controller) create(ctx context.Context, ew *v1alpha1.ElasticWeb, d *Desired, kind string) (metav1.Object, error) {
	opts := metav1.CreateOptions{FieldManager: names.FieldManager}
	var (
		obj metav1.Object
		err error
	)
	switch kind {
	case "Deployment":
		var o appsv1.Deployment
		if err = convert(d.Deployment, &o); err == nil {
			obj, err = c.cfg.Client.AppsV1().Deployments(ew.Namespace).Create(ctx, &o, opts)
		}
	case "Service":
		var o corev1.Service
		if err = convert(d.Service, &o); err == nil {
			obj, err = c.cfg.Client.CoreV1().Services(ew.Namespace).Create(ctx, &o, opts)
		}
	case "HorizontalPodAutoscaler":
		var o autoscalingv2.HorizontalPodAutoscaler
		if err = convert(d.HPA, &o); err == nil {
			obj, err = c.cfg.Client.AutoscalingV2().HorizontalPodAutoscalers(ew.Namespace).Create(ctx, &o, opts)
		}
	default:
		return nil, fmt.Errorf("unknown kind %q", kind)
	}
	if err != nil {
		return nil, fmt.Errorf("creating %s %s/%s: %w", kind, ew.Namespace, ew.Name, err)
	}
	return obj, nil
}

func convert(ac, into any) error {
	b, err := json.Marshal(ac)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, into)
}

// upgradeToApply moves the fields capscale's Create (an Update operation)
// owns to capscale's Apply manager, so that a field later left out of the
// apply is removed rather than kept by the old entry. Nothing to do (no
// such entry) is the common case.
func (c *Controller) upgradeToApply(ctx context.Context, ew *v1alpha1.ElasticWeb, kind string, obj metav1.Object) error {
	ro, ok := obj.(runtime.Object)
	if !ok {
		return nil
	}
	patch, err := csaupgrade.UpgradeManagedFieldsPatch(ro, sets.New(names.FieldManager), names.FieldManager)
	if err != nil || patch == nil {
		return err
	}
	po := metav1.PatchOptions{FieldManager: names.FieldManager}
	switch kind {
	case "Deployment":
		_, err = c.cfg.Client.AppsV1().Deployments(ew.Namespace).Patch(ctx, ew.Name, types.JSONPatchType, patch, po)
	case "Service":
		_, err = c.cfg.Client.CoreV1().Services(ew.Namespace).Patch(ctx, ew.Name, types.JSONPatchType, patch, po)
	default:
		_, err = c.cfg.Client.AutoscalingV2().HorizontalPodAutoscalers(ew.Namespace).Patch(ctx, ew.Name, types.JSONPatchType, patch, po)
	}
	if err != nil {
		return fmt.Errorf("handing the create-time fields of %s %s/%s to the apply manager: %w", kind, ew.Namespace, ew.Name, err)
	}
	return nil
}

func (c *Controller) applyWithUID(ctx context.Context, ew *v1alpha1.ElasticWeb, d *Desired, kind string, uid types.UID) error {
	// Force: a field another manager took over (an image set by hand) is
	// drift, and capscale takes it back.
	opts := metav1.ApplyOptions{FieldManager: names.FieldManager, Force: true}
	var err error
	switch kind {
	case "Deployment":
		_, err = c.cfg.Client.AppsV1().Deployments(ew.Namespace).Apply(ctx, d.Deployment.WithUID(uid), opts)
	case "Service":
		_, err = c.cfg.Client.CoreV1().Services(ew.Namespace).Apply(ctx, d.Service.WithUID(uid), opts)
	case "HorizontalPodAutoscaler":
		_, err = c.cfg.Client.AutoscalingV2().HorizontalPodAutoscalers(ew.Namespace).Apply(ctx, d.HPA.WithUID(uid), opts)
	default:
		return fmt.Errorf("unknown kind %q", kind)
	}
	if err != nil {
		return fmt.Errorf("applying %s %s/%s: %w", kind, ew.Namespace, ew.Name, err)
	}
	return nil
}

func (c *Controller) getLive(ctx context.Context, ew *v1alpha1.ElasticWeb, kind string) (metav1.Object, error) {
	get := metav1.GetOptions{}
	switch kind {
	case "Deployment":
		return c.cfg.Client.AppsV1().Deployments(ew.Namespace).Get(ctx, ew.Name, get)
	case "Service":
		return c.cfg.Client.CoreV1().Services(ew.Namespace).Get(ctx, ew.Name, get)
	default:
		return c.cfg.Client.AutoscalingV2().HorizontalPodAutoscalers(ew.Namespace).Get(ctx, ew.Name, get)
	}
}

// writeStatus server-side applies the status when it changed. capscale is
// the status's only writer, so apply needs no resourceVersion.
func (c *Controller) writeStatus(ctx context.Context, ew *v1alpha1.ElasticWeb, st *v1alpha1.ElasticWebStatus) error {
	if StatusEqual(&ew.Status, st) {
		return nil
	}
	status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(st)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.SchemeGroupVersion.String(),
		"kind":       v1alpha1.ElasticWebKind,
		"metadata":   map[string]any{"name": ew.Name, "namespace": ew.Namespace},
		"status":     status,
	}}
	_, err = c.cfg.Dynamic.Resource(v1alpha1.ElasticWebResource).Namespace(ew.Namespace).
		ApplyStatus(ctx, ew.Name, u, metav1.ApplyOptions{FieldManager: names.FieldManager, Force: true})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("writing status of ElasticWeb %s/%s: %w", ew.Namespace, ew.Name, err)
	}
	return nil
}
