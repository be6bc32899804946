package nodeimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestWriteDockerArchive reads a written archive back as `ctr images
// import` does: the manifest names the config and the layer, the config's
// diff_id is the layer's digest, the layer holds the binary as the
// entrypoint, executable.
func TestWriteDockerArchive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "web.tar")
	bin := []byte("\x7fELF not really")
	if err := WriteDockerArchive(path, Web, "web", bin); err != nil {
		t.Fatal(err)
	}
	files := untar(t, mustRead(t, path))
	var manifest []manifestEntry
	if err := json.Unmarshal(files["manifest.json"].data, &manifest); err != nil {
		t.Fatal(err)
	}
	if len(manifest) != 1 || len(manifest[0].RepoTags) != 1 || manifest[0].RepoTags[0] != Web || len(manifest[0].Layers) != 1 {
		t.Fatalf("manifest %+v, want one image tagged %s with one layer", manifest, Web)
	}
	var cfg imageConfig
	if err := json.Unmarshal(files[manifest[0].Config].data, &cfg); err != nil {
		t.Fatalf("config %s: %v", manifest[0].Config, err)
	}
	layer := files[manifest[0].Layers[0]].data
	sum := sha256.Sum256(layer)
	if want := "sha256:" + hex.EncodeToString(sum[:]); len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != want {
		t.Errorf("diff_ids %v, want [%s]", cfg.RootFS.DiffIDs, want)
	}
	if len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/web" || cfg.OS != "linux" {
		t.Errorf("config %+v, want entrypoint /web on linux", cfg)
	}
	got := untar(t, layer)["web"]
	if !bytes.Equal(got.data, bin) || got.mode&0o111 == 0 {
		t.Errorf("layer's /web: %q mode %o, want the binary, executable", got.data, got.mode)
	}
}

type entry struct {
	data []byte
	mode int64
}

func untar(t *testing.T, b []byte) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = entry{data, h.Mode}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
