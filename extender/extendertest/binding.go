package extendertest

import (
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// BindingAPI makes a fake clientset behave like the API server for
// pods/binding: the pod must exist with the binding's UID and be unbound, and
// it is then bound (so that watches see the update). Failures can be injected.
type BindingAPI struct {
	mu sync.Mutex
	// Fail, when set, decides an error per binding before it is applied.
	Fail func(b *v1.Binding) error
	// Calls counts Binding creates.
	Calls int
}

// Install puts the reactor in front of cs's tracker.
func (a *BindingAPI) Install(cs *fake.Clientset) {
	cs.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		ca, ok := action.(k8stesting.CreateAction)
		if !ok || ca.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := ca.GetObject().(*v1.Binding)
		a.mu.Lock()
		defer a.mu.Unlock()
		a.Calls++
		if a.Fail != nil {
			if err := a.Fail(b); err != nil {
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
