package extender

import (
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/capscale/capscale/internal/names"
)

// pod returns a pod in namespace "ns" asking for need underlay IPs (as a
// limit, the way users write it) and bound to node when node is not empty.
func pod(name, node string, need int64) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec: v1.PodSpec{
			NodeName:   node,
			Containers: []v1.Container{{Name: "app"}},
		},
		Status: v1.PodStatus{Phase: v1.PodPending},
	}
	if need > 0 {
		p.Spec.Containers[0].Resources.Limits = v1.ResourceList{
			v1.ResourceName(names.UnderlayIPResource): *resource.NewQuantity(need, resource.DecimalSI),
		}
	}
	if node != "" {
		p.Status.Phase = v1.PodRunning
	}
	return p
}

// node returns a node, with the capacity annotation when capacity is not "".
func node(name, capacity string) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
	if capacity != "" {
		n.Annotations = map[string]string{names.UnderlayIPCapacityAnnotation: capacity}
	}
	return n
}

// newTestLedger returns a ledger with default capacity 10 and the given
// nodes and pods applied.
func newTestLedger(nodes []*v1.Node, pods []*v1.Pod) *Ledger {
	l := NewLedger(LedgerOptions{DefaultCapacity: 10})
	for _, n := range nodes {
		l.SetNode(n)
	}
	for _, p := range pods {
		l.SetPod(p)
	}
	return l
}

// bindingAPI makes a fake clientset behave like the API server for
// pods/binding: the pod must exist with the binding's UID and be unbound, and
// it is then bound (so that watches see the update). Failures can be injected.
type bindingAPI struct {
	mu sync.Mutex
	// fail, when set, decides an error per binding before it is applied.
	fail func(b *v1.Binding) error
	// calls counts Binding creates.
	calls int
}

func (a *bindingAPI) install(cs *fake.Clientset) {
	cs.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		ca, ok := action.(k8stesting.CreateAction)
		if !ok || ca.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := ca.GetObject().(*v1.Binding)
		a.mu.Lock()
		defer a.mu.Unlock()
		a.calls++
		if a.fail != nil {
			if err := a.fail(b); err != nil {
				return true, nil, err
			}
		}
		gvr := v1.SchemeGroupVersion.WithResource("pods")
		obj, err := cs.Tracker().Get(gvr, b.Namespace, b.Name, metav1.GetOptions{})
		if err != nil {
			return true, nil, err
		}
		p := obj.(*v1.Pod).DeepCopy()
		if b.UID != "" && p.UID != b.UID {
			return true, nil, apierrors.NewConflict(v1.Resource("pods/binding"), b.Name, fmt.Errorf("precondition failed: UID in precondition: %v, UID in object meta: %v", b.UID, p.UID))
		}
		if p.Spec.NodeName != "" {
			return true, nil, apierrors.NewConflict(v1.Resource("pods/binding"), b.Name, fmt.Errorf("pod %v is already assigned to node %q", b.Name, p.Spec.NodeName))
		}
		p.Spec.NodeName = b.Target.Name
		p.Status.Phase = v1.PodRunning
		return true, nil, cs.Tracker().Update(gvr, p, b.Namespace, metav1.UpdateOptions{})
	})
}
