package main

import (
	"context"
	"fmt"
	"sync"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/capscale/capscale/e2e/stack"
)

// Cilium v1.20.2's operator client: ServiceAccount kube-system/cilium-operator
// (install/kubernetes/cilium/values.yaml:172, in kube-system as Cilium installs),
// 100 queries a second with bursts of 200 (operator/cmd/root.go:116-117).
// Writing as it does puts the IPAM's writes where kube-apiserver's priority
// and fairness puts the operator's (a kube-system ServiceAccount:
// workload-high), not among the exempt system:masters requests.
const (
	operatorNamespace = "kube-system"
	operatorName      = "cilium-operator"
	operatorQPS       = 100
	operatorBurst     = 200
)

// ipamWriter writes CiliumNodes as cilium-operator does: from what it last
// wrote (its informer's copy), an update and a status update, no read first.
type ipamWriter struct {
	dyn  dynamic.ResourceInterface
	mu   sync.Mutex
	rv   map[string]string        // by name: the resourceVersion last written
	tail map[string]chan struct{} // by name: closed when the last write in line is done
}

// ticket is one write's place in its CiliumNode's line. cilium-operator
// writes a CiliumNode from one worker at a time (its workqueue never hands a
// key to two), so a node revisited while its last write is still in flight
// waits for it. Two writes at once would both start from the same
// resourceVersion, and the second would fail with a conflict.
type ticket struct {
	prev <-chan struct{} // nil: first in line
	done func()          // lets the next in line go
}

// line takes name's next place; call it in the order the writes are made.
func (w *ipamWriter) line(name string) ticket {
	w.mu.Lock()
	defer w.mu.Unlock()
	mine := make(chan struct{})
	prev := w.tail[name]
	w.tail[name] = mine
	return ticket{prev: prev, done: func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		close(mine)
		if w.tail[name] == mine {
			delete(w.tail, name)
		}
	}}
}

// wait returns once the write before t in its line is done.
func (t ticket) wait(ctx context.Context) error {
	if t.prev == nil {
		return nil
	}
	select {
	case <-t.prev:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func newIPAMWriter(ctx context.Context, s *stack.Stack) (*ipamWriter, error) {
	if err := grantOperator(ctx, s); err != nil {
		return nil, err
	}
	cfg, err := serviceAccountConfig(ctx, s, operatorNamespace, operatorName, operatorQPS, operatorBurst)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	w := &ipamWriter{dyn: dyn.Resource(ciliumNodes), rv: map[string]string{}, tail: map[string]chan struct{}{}}
	list, err := w.dyn.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing CiliumNodes as %s/%s: %w", operatorNamespace, operatorName, err)
	}
	for _, o := range list.Items {
		w.rv[o.GetName()] = o.GetResourceVersion()
	}
	return w, nil
}

// serviceAccountConfig is a client config that acts as the ServiceAccount
// ns/name, at its component's client rate limits: the bench's writes then
// meet RBAC, admission and priority and fairness as that component's do.
func serviceAccountConfig(ctx context.Context, s *stack.Stack, ns, name string, qps float32, burst int) (*rest.Config, error) {
	token, err := s.ServiceAccountToken(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	cfg := rest.AnonymousClientConfig(s.Config)
	cfg.BearerToken = token
	cfg.QPS, cfg.Burst = qps, burst
	return cfg, nil
}

// grantOperator gives the operator's ServiceAccount what the bench writes
// with it: CiliumNodes and their status (a subset of cilium-operator's
// ClusterRole, install/kubernetes/cilium/templates/cilium-operator/clusterrole.yaml).
func grantOperator(ctx context.Context, s *stack.Stack) error {
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-cilium-operator"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{ciliumNodes.Group},
			Resources: []string{"ciliumnodes", "ciliumnodes/status"},
			Verbs:     []string{"list", "update"},
		}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-cilium-operator"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: operatorNamespace, Name: operatorName}},
	}
	if _, err := s.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if _, err := s.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// put writes obj's spec and then its status over what was last written.
// Writes to one name must not overlap: concurrent callers hold its ticket.
func (w *ipamWriter) put(ctx context.Context, obj *unstructured.Unstructured) error {
	name := obj.GetName()
	w.mu.Lock()
	rv := w.rv[name]
	w.mu.Unlock()
	obj = obj.DeepCopy()
	obj.SetResourceVersion(rv)
	cur, err := w.dyn.Update(ctx, obj, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("updating CiliumNode %s: %w", name, err)
	}
	obj.SetResourceVersion(cur.GetResourceVersion())
	cur, err = w.dyn.UpdateStatus(ctx, obj, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("updating the status of CiliumNode %s: %w", name, err)
	}
	w.mu.Lock()
	w.rv[name] = cur.GetResourceVersion()
	w.mu.Unlock()
	return nil
}

// version is the resourceVersion last written to name.
func (w *ipamWriter) version(name string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rv[name]
}
