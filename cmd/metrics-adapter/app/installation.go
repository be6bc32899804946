package app

import (
	"context"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// DefaultInstallationClusterRole is the adapter's ClusterRole in deploy/ and
// the chart: the object whose UID names an install.
const DefaultInstallationClusterRole = "capscale:metrics-adapter"

// installation is the identity of the install an adapter belongs to: the
// UID of its ClusterRole, which every install (helm install, kubectl apply,
// a GitOps sync) creates anew and an upgrade or a restart keeps. It marks
// the APIService an uninstall gave back (so that no adapter of that install
// takes it again) and owns the APIService the adapter registers (so that it
// goes with the install).
type installation struct {
	client      kubernetes.Interface
	clusterRole string

	mu    sync.Mutex
	owner *metav1.OwnerReference
}

// ref reads the ClusterRole once (a failure is retried at the next call) and
// returns it as an owner reference; its UID is the install's identity.
func (i *installation) ref(ctx context.Context) (*metav1.OwnerReference, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.owner != nil {
		return i.owner, nil
	}
	cr, err := i.client.RbacV1().ClusterRoles().Get(ctx, i.clusterRole, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading ClusterRole %s, whose UID names this install: %w", i.clusterRole, err)
	}
	i.owner = &metav1.OwnerReference{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: cr.Name, UID: cr.UID}
	return i.owner, nil
}

// id is the install's identity ("" when the ClusterRole is gone: an install
// already half removed, which no adapter of its can take anything back for).
func (i *installation) id(ctx context.Context) (string, error) {
	ref, err := i.ref(ctx)
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return string(ref.UID), nil
}
