// Package nodeimage builds the images a real node (package plane) runs,
// without a registry: static Go binaries, each wrapped in a docker-archive
// tarball (manifest.json, an image config, one layer) that
// `ctr images import` accepts. Pods name them with imagePullPolicy: Never.
package nodeimage

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"
)

const (
	// Web is REAL_NODE_IMAGE: an HTTP server on :8080 that answers with its
	// pod's name and records SIGTERM (e2e/nodeimage/web).
	Web = "capscale.local/web:1"
	// Pause is the real nodes' sandbox image: it waits for SIGTERM
	// (e2e/nodeimage/pause).
	Pause = "capscale.local/pause:1"
)

// Image is a built image: its reference and its docker-archive tarball.
type Image struct {
	Ref     string
	Tarball string
}

// images maps each reference to its command, a package of this module.
var images = []struct{ ref, pkg, bin string }{
	{Web, "./e2e/nodeimage/web", "web"},
	{Pause, "./e2e/nodeimage/pause", "pause"},
}

// Build compiles the images' commands in repoRoot (static: CGO_ENABLED=0)
// into dir and writes one tarball per image there.
func Build(ctx context.Context, repoRoot, dir string) ([]Image, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	args := []string{"build", "-trimpath", "-ldflags=-s -w", "-o", dir + string(filepath.Separator)}
	for _, im := range images {
		args = append(args, im.pkg)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building the real nodes' image commands: %w\n%s", err, out)
	}
	var out []Image
	for _, im := range images {
		bin, err := os.ReadFile(filepath.Join(dir, im.bin))
		if err != nil {
			return nil, err
		}
		tarball := filepath.Join(dir, im.bin+".tar")
		if err := WriteDockerArchive(tarball, im.ref, im.bin, bin); err != nil {
			return nil, fmt.Errorf("writing image %s: %w", im.ref, err)
		}
		out = append(out, Image{Ref: im.ref, Tarball: tarball})
	}
	return out, nil
}

// WriteDockerArchive writes a docker-archive tarball of the image ref whose
// only layer holds bin at /name, its entrypoint.
func WriteDockerArchive(path, ref, name string, bin []byte) error {
	layer, err := layerTar(name, bin)
	if err != nil {
		return err
	}
	layerSum := sha256.Sum256(layer)
	diffID := "sha256:" + hex.EncodeToString(layerSum[:])
	config, err := json.Marshal(imageConfig{
		Architecture: runtime.GOARCH,
		OS:           "linux",
		Created:      time.Unix(0, 0).UTC(),
		Config:       containerConfig{Entrypoint: []string{"/" + name}, Env: []string{"PATH=/"}},
		RootFS:       rootFS{Type: "layers", DiffIDs: []string{diffID}},
	})
	if err != nil {
		return err
	}
	configSum := sha256.Sum256(config)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	layerName := hex.EncodeToString(layerSum[:]) + "/layer.tar"
	manifest, err := json.Marshal([]manifestEntry{{Config: configName, RepoTags: []string{ref}, Layers: []string{layerName}}})
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		data []byte
	}{{configName, config}, {layerName, layer}, {"manifest.json", manifest}} {
		if err := addFile(tw, f.name, 0o644, f.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// layerTar is a layer holding the binary at /name and an empty /tmp.
func layerTar(name string, bin []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777, ModTime: time.Unix(0, 0)}); err != nil {
		return nil, err
	}
	if err := addFile(tw, name, 0o755, bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func addFile(tw *tar.Writer, name string, mode int64, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: time.Unix(0, 0)}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

// The docker-archive format's files (what `docker save` writes).
type manifestEntry struct {
	Config   string   `json:"Config"`
	RepoTags []string `json:"RepoTags"`
	Layers   []string `json:"Layers"`
}

type imageConfig struct {
	Architecture string          `json:"architecture"`
	OS           string          `json:"os"`
	Created      time.Time       `json:"created"`
	Config       containerConfig `json:"config"`
	RootFS       rootFS          `json:"rootfs"`
}

type containerConfig struct {
	Entrypoint []string `json:"Entrypoint"`
	Env        []string `json:"Env"`
}

type rootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}
