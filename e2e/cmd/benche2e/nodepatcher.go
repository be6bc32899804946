package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/capscale/capscale/controller/capacitysource"
	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
	"github.com/capscale/capscale/internal/names"
)

// nodePatcher writes the mirror's Node patch in a patchOnly round: the
// same request capscale-controller sends for a changed value (a JSON
// merge patch of its annotation, its field manager), from the same
// ServiceAccount at the same client rate limits, so that kube-apiserver
// and every Node watcher pay what they pay for capscale's.
type nodePatcher struct{ client, admin kubernetes.Interface }

// capscale-controller's --capacity-source-qps and its burst, as it
// starts by default.
const mirrorQPS, mirrorBurst = 200, 400

func newNodePatcher(ctx context.Context, s *stack.Stack) (*nodePatcher, error) {
	cfg, err := serviceAccountConfig(ctx, s, stack.Namespace, "capscale-controller", mirrorQPS, mirrorBurst)
	if err != nil {
		return nil, err
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &nodePatcher{client: c, admin: s.Client}, nil
}

// patch gives node the mirrored capacity, as capscale-controller would
// have: it finds the value already there when it runs again and writes
// nothing.
func (p *nodePatcher) patch(ctx context.Context, node string, capacity int) error {
	return p.send(ctx, node, fmt.Sprint(capacity), patchForms[0])
}

// send writes value into node's mirrored-capacity annotation in form f
// (patchForms[0] is the request capscale-controller sends).
func (p *nodePatcher) send(ctx context.Context, node, value string, f patchForm) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		names.UnderlayIPSourceCapacityAnnotation: value}}})
	if err != nil {
		return err
	}
	_, err = p.client.CoreV1().Nodes().Patch(ctx, node, f.pt, body,
		metav1.PatchOptions{FieldManager: capacitysource.FieldManager, FieldValidation: f.validation})
	if err != nil {
		return fmt.Errorf("patching Node %s as capscale-controller (%s): %w", node, f.name, err)
	}
	return nil
}

// nodeWritesBinding binds the policy deploy/controller/node-writes.yaml
// holds capscale-controller's Node writes to.
const nodeWritesBinding = "capscale-controller-node-writes"

// unbind deletes the node-writes policy's binding and waits until a write
// the policy denies goes through (kube-apiserver reads bindings from an
// informer); restore puts the binding back and waits until it denies again.
func (p *nodePatcher) unbind(ctx context.Context) (restore func() error, err error) {
	bindings := p.admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	b, err := bindings.Get(ctx, nodeWritesBinding, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading the node-writes policy's binding: %w", err)
	}
	if err := bindings.Delete(ctx, b.Name, metav1.DeleteOptions{}); err != nil {
		return nil, err
	}
	if err := p.waitDenied(ctx, false); err != nil {
		return nil, err
	}
	return func() error {
		fresh := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: b.Name, Labels: b.Labels}, Spec: b.Spec}
		if _, err := bindings.Create(ctx, fresh, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("restoring the node-writes policy's binding: %w", err)
		}
		if err := p.waitDenied(ctx, true); err != nil {
			return fmt.Errorf("the node-writes policy's binding restored but not in force: %w", err)
		}
		return nil
	}, nil
}

// waitDenied waits until a label write as capscale-controller (one the
// policy denies) is denied, or with denied false, dry-run allowed.
func (p *nodePatcher) waitDenied(ctx context.Context, denied bool) error {
	node := plane.NodeName(0)
	body := []byte(`{"metadata":{"labels":{"bench.capscale.io/policy-probe":"x"}}}`)
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := p.client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, body, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
			return false, err
		}
		return (err != nil) == denied, nil
	})
}
