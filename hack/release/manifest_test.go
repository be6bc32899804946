package main

import (
	"archive/tar"
	"archive/zip"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestManifest checks the manifest against krew-index's rules on archives
// packed as a release packs them: every platform once, its sha256 that of
// the archive on disk, its bin inside the archive and executable.
func TestManifest(t *testing.T) {
	dir := t.TempDir()
	var archives []Archive
	for _, p := range DefaultPlatforms {
		goos, goarch, _ := strings.Cut(p, "/")
		bin := filepath.Join(dir, goos+goarch, binName(goos))
		if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, []byte("binary for "+p), 0o755); err != nil {
			t.Fatal(err)
		}
		a, err := Pack(bin, dir, "v1.2.3", goos, goarch)
		if err != nil {
			t.Fatal(err)
		}
		archives = append(archives, a)
	}
	out, err := Manifest("v1.2.3", "https://example.com/dl", archives)
	if err != nil {
		t.Fatal(err)
	}
	var m Plugin
	if err := yaml.UnmarshalStrict(out, &m); err != nil {
		t.Fatalf("manifest does not parse strictly: %v\n%s", err, out)
	}
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" || m.Metadata.Name != PluginName {
		t.Errorf("header %s %s %s", m.APIVersion, m.Kind, m.Metadata.Name)
	}
	if m.Spec.Version != "v1.2.3" || m.Spec.ShortDescription == "" || len(m.Spec.ShortDescription) > 60 || m.Spec.Description == "" || !strings.HasPrefix(m.Spec.Homepage, "https://") {
		t.Errorf("spec %+v", m.Spec)
	}
	seen := map[string]bool{}
	for _, p := range m.Spec.Platforms {
		key := p.Selector.MatchLabels["os"] + "/" + p.Selector.MatchLabels["arch"]
		if seen[key] || len(p.Selector.MatchLabels) != 2 {
			t.Errorf("platform %s listed twice or with other labels: %v", key, p.Selector.MatchLabels)
		}
		seen[key] = true
		path := filepath.Join(dir, filepath.Base(p.URI))
		if !strings.HasPrefix(p.URI, "https://example.com/dl/v1.2.3/") {
			t.Errorf("%s: uri %s", key, p.URI)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: the uri names no packed archive: %v", key, err)
		}
		if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != p.SHA256 {
			t.Errorf("%s: sha256 %s is not the archive's", key, p.SHA256)
		}
		if len(p.Files) != 1 || p.Files[0].From != p.Bin || p.Files[0].To != "." {
			t.Errorf("%s: files %+v", key, p.Files)
		}
		if wantExe := key == "windows/amd64"; strings.HasSuffix(p.Bin, ".exe") != wantExe {
			t.Errorf("%s: bin %s", key, p.Bin)
		}
		if got := archived(t, path); got[p.Bin] != "binary for "+key {
			t.Errorf("%s: archive holds %v, want %s with the build", key, got, p.Bin)
		}
	}
	if len(seen) != len(DefaultPlatforms) {
		t.Errorf("platforms %v, want %v", seen, DefaultPlatforms)
	}
	for _, v := range []string{"1.2.3", "v1.2", "dev", "v01.2.3"} {
		if _, err := Manifest(v, "https://example.com", archives); err == nil {
			t.Errorf("version %q accepted", v)
		}
	}
}

// archived returns the executable files of a tar.gz or zip by name.
func archived(t *testing.T, path string) map[string]string {
	t.Helper()
	out := map[string]string{}
	if strings.HasSuffix(path, ".zip") {
		zr, err := zip.OpenReader(path)
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		for _, f := range zr.File {
			r, _ := f.Open()
			b, _ := io.ReadAll(r)
			r.Close()
			if f.Mode()&0o111 != 0 {
				out[f.Name] = string(b)
			}
		}
		return out
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		if h.Mode&0o111 != 0 {
			out[h.Name] = string(b)
		}
	}
}
