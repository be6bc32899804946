package main

import (
	"archive/tar"
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

var testMeta = Meta{Version: "v0.0.1-test", Revision: "0123456789abcdef", Source: "https://github.com/capscale/capscale", Created: time.Unix(1700000000, 0).UTC()}

var testPlatforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

// buildBins cross-compiles two small static Go programs per platform into
// dir/OS_ARCH, as make image lays capscale's binaries out.
func buildBins(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/bins\n\ngo 1.26.0\n")
	write("main.go", "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello\") }\n")
	for _, p := range testPlatforms {
		out := filepath.Join(dir, "bin", p.OS+"_"+p.Architecture)
		for _, b := range []string{"extender", "metrics-adapter"} {
			cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(out, b), ".")
			cmd.Dir = src
			cmd.Env = append(os.Environ(), "GOOS="+p.OS, "GOARCH="+p.Architecture, "CGO_ENABLED=0", "GOFLAGS=")
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go build: %v\n%s", err, b)
			}
		}
	}
	return filepath.Join(dir, "bin")
}

func TestImage(t *testing.T) {
	bins := buildBins(t)
	res, err := Build(bins, testPlatforms, testMeta)
	if err != nil {
		t.Fatal(err)
	}
	im, err := res.Index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 2 {
		t.Fatalf("index has %d manifests, want one per platform", len(im.Manifests))
	}
	if got := im.Annotations["org.opencontainers.image.revision"]; got != testMeta.Revision {
		t.Errorf("index revision annotation = %q", got)
	}
	for i, d := range im.Manifests {
		if d.Platform == nil || d.Platform.Architecture != testPlatforms[i].Architecture {
			t.Fatalf("manifest %d platform %v, want %v", i, d.Platform, testPlatforms[i])
		}
		img, err := res.Index.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Config.User != "65532:65532" || cf.Architecture != d.Platform.Architecture || cf.OS != "linux" {
			t.Errorf("%s: config user %q os %q arch %q", d.Platform.Architecture, cf.Config.User, cf.OS, cf.Architecture)
		}
		for _, k := range []string{"version", "revision", "source", "created"} {
			if cf.Config.Labels["org.opencontainers.image."+k] == "" {
				t.Errorf("%s: label org.opencontainers.image.%s missing", d.Platform.Architecture, k)
			}
		}
		if len(cf.Config.Entrypoint) != 0 {
			t.Errorf("entrypoint %v: each pod names its binary", cf.Config.Entrypoint)
		}
		// No base image: /tmp and one layer per binary, nothing else.
		files := map[string]int64{}
		layers, _ := img.Layers()
		if len(layers) != 3 {
			t.Errorf("%d layers, want /tmp and one per binary", len(layers))
		}
		if _, err := exportFiles(img, files); err != nil {
			t.Fatal(err)
		}
		if files["extender"] != 0o755 || files["metrics-adapter"] != 0o755 || files["tmp/"] != 0o1777 || len(files) != 3 {
			t.Errorf("files %v, want /extender and /metrics-adapter 0755 and /tmp 1777", files)
		}
	}
	// The same binaries and metadata give the same index: a rebuild is checkable.
	again, err := Build(bins, testPlatforms, testMeta)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := res.Index.Digest()
	d2, _ := again.Index.Digest()
	if d1 != d2 {
		t.Errorf("two builds of the same binaries: %s and %s", d1, d2)
	}
}

func TestSBOM(t *testing.T) {
	bins := buildBins(t)
	res, err := Build(bins, testPlatforms[:1], testMeta)
	if err != nil {
		t.Fatal(err)
	}
	a := res.Platforms[0].SBOM
	var m v1.Manifest
	if err := json.Unmarshal(a.Manifest, &m); err != nil {
		t.Fatal(err)
	}
	img, _ := res.Platforms[0].Image.Digest()
	if m.ArtifactType != SPDXMediaType || m.Subject == nil || m.Subject.Digest != img || len(m.Layers) != 1 || string(a.Blobs[m.Config.Digest]) != "{}" {
		t.Fatalf("artifact manifest %s", a.Manifest)
	}
	var doc spdxDoc
	if err := json.Unmarshal(a.Blobs[m.Layers[0].Digest], &doc); err != nil {
		t.Fatal(err)
	}
	if doc.SPDXVersion != "SPDX-2.3" {
		t.Errorf("spdxVersion %q", doc.SPDXVersion)
	}
	names := map[string]bool{}
	for _, p := range doc.Packages {
		names[p.Name] = true
	}
	for _, want := range []string{"capscale", "/extender", "/metrics-adapter", "example.com/bins", "stdlib"} {
		if !names[want] {
			t.Errorf("SBOM has no package %q: %v", want, names)
		}
	}
}

func TestPushToRegistry(t *testing.T) {
	bins := buildBins(t)
	res, err := Build(bins, testPlatforms, testMeta)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "layout")
	if err := WriteLayout(dir, res, testMeta.Version); err != nil {
		t.Fatal(err)
	}
	if _, err := layout.FromPath(dir); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewRegistry(t.TempDir(), true))
	defer srv.Close()
	repo := strings.TrimPrefix(srv.URL, "http://") + "/capscale"
	if err := Push(dir, repo, "", true); err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(repo+":"+testMeta.Version, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(ref)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := res.Index.Digest()
	if got, _ := idx.Digest(); got != want {
		t.Fatalf("pulled index %s, pushed %s", got, want)
	}
	// Each platform's SBOM is found from its image, as cosign and oras look.
	// (No artifactType filter: go-containerregistry's test registry reports
	// the config's media type as artifactType, not the manifest's field.)
	for _, pi := range res.Platforms {
		d, _ := pi.Image.Digest()
		refs, err := remote.Referrers(ref.Context().Digest(d.String()))
		if err != nil {
			t.Fatal(err)
		}
		rm, _ := refs.IndexManifest()
		if len(rm.Manifests) != 1 || rm.Manifests[0].Digest != pi.SBOM.Digest {
			t.Errorf("%s: referrers %+v, want the SBOM %s", pi.Platform.Architecture, rm.Manifests, pi.SBOM.Digest)
		}
	}
}

// exportFiles records each path of the image's filesystem and its mode.
func exportFiles(img v1.Image, files map[string]int64) (int, error) {
	layers, err := img.Layers()
	if err != nil {
		return 0, err
	}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			return 0, err
		}
		if err := tarModes(rc, files); err != nil {
			return 0, err
		}
		rc.Close()
	}
	return len(files), nil
}

func tarModes(r io.Reader, files map[string]int64) error {
	tr := newTarReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if h.Uid != 0 || h.Gid != 0 {
			return errUID(h.Name)
		}
		files[h.Name] = h.Mode
	}
}

func newTarReader(r io.Reader) *tar.Reader { return tar.NewReader(r) }

type errUID string

func (e errUID) Error() string { return string(e) + " is not owned by root: the user could rewrite it" }
