// Package ipamcrd gives the end-to-end tests each IPAM's CRD as that
// project publishes it: the YAML file read out of the project's own Go
// module, downloaded at the version recorded here with `go mod download`
// (the Go module proxy; a cached module is not fetched again). No
// hand-written copy: a field the project renames breaks the preset's test.
package ipamcrd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// CRD is one IPAM's CustomResourceDefinition in its project's module.
type CRD struct {
	// Module and Version are the Go module that ships the file.
	Module, Version string
	// Path is the file inside the module.
	Path string
	// Name is the CRD's metadata.name.
	Name string
}

// The CRDs the capacity-source presets read. The versions are the newest
// tags the module proxy serves (it refuses the version list of
// azure-container-networking; v1.8.11 is a tag of 2026-07-17, and v1.16.x
// is a retracted mis-tag).
var (
	// CiliumNode, for the cilium-eni, cilium-azure and cilium-multi-pool
	// presets.
	CiliumNode = CRD{
		Module: "github.com/cilium/cilium", Version: "v1.20.2",
		Path: "pkg/k8s/apis/cilium.io/client/crds/v2/ciliumnodes.yaml", Name: "ciliumnodes.cilium.io",
	}
	// NodeNetworkConfig, Azure CNS's, for the azure-cns preset.
	NodeNetworkConfig = CRD{
		Module: "github.com/Azure/azure-container-networking", Version: "v1.8.11",
		Path: "crd/nodenetworkconfig/manifests/acn.azure.com_nodenetworkconfigs.yaml", Name: "nodenetworkconfigs.acn.azure.com",
	}
)

var (
	mu   sync.Mutex
	dirs = map[string]string{}
)

// File returns the path of the CRD's YAML in the module cache, downloading
// the module first if it is not there.
func (c CRD) File(ctx context.Context) (string, error) {
	dir, err := moduleDir(ctx, c.Module+"@"+c.Version)
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, filepath.FromSlash(c.Path))
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s@%s has no %s: %w", c.Module, c.Version, c.Path, err)
	}
	return p, nil
}

// moduleDir runs `go mod download -json mod` outside any module (so that
// the repository's go.mod is neither read nor changed) and returns the
// module's directory.
func moduleDir(ctx context.Context, mod string) (string, error) {
	mu.Lock()
	defer mu.Unlock()
	if d, ok := dirs[mod]; ok {
		return d, nil
	}
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", mod)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GO111MODULE=on")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	runErr := cmd.Run()
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out.Bytes(), &info); err != nil || info.Error != "" || runErr != nil || info.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %v %s %s", mod, runErr, info.Error, stderr.String())
	}
	dirs[mod] = info.Dir
	return info.Dir, nil
}

// Put creates or replaces obj as an IPAM's controllers write it: the
// object, then its status through the status subresource (which ignores
// status on create and update), when it has one.
func Put(ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) error {
	var r dynamic.ResourceInterface = dyn.Resource(gvr)
	if ns := obj.GetNamespace(); ns != "" {
		r = dyn.Resource(gvr).Namespace(ns)
	}
	obj = obj.DeepCopy()
	cur, err := r.Get(ctx, obj.GetName(), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		cur, err = r.Create(ctx, obj, metav1.CreateOptions{})
	case err == nil:
		obj.SetResourceVersion(cur.GetResourceVersion())
		cur, err = r.Update(ctx, obj, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("writing %s %s: %w", gvr.Resource, obj.GetName(), err)
	}
	if _, ok := obj.Object["status"]; !ok {
		return nil
	}
	obj.SetResourceVersion(cur.GetResourceVersion())
	if _, err := r.UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing the status of %s %s: %w", gvr.Resource, obj.GetName(), err)
	}
	return nil
}
