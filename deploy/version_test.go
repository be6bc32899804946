package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestOneVersion: VERSION is the one version string. The chart's appVersion
// is it (the image tag the chart pulls), its version is it without the v,
// deploy/'s kustomization and every capscale image it renders pull it, and
// `make release` pushes it: an install from the repository pulls the tag a
// release pushed.
func TestOneVersion(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(b))
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`).MatchString(version) {
		t.Fatalf("VERSION is %q, want vMAJOR.MINOR.PATCH", version)
	}

	var chart struct{ Version, AppVersion string }
	if b, err = os.ReadFile(filepath.Join(chartDir(t), "Chart.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &chart); err != nil {
		t.Fatal(err)
	}
	if chart.AppVersion != version || chart.Version != strings.TrimPrefix(version, "v") {
		t.Errorf("Chart.yaml: version %q, appVersion %q; want %q and %q", chart.Version, chart.AppVersion, strings.TrimPrefix(version, "v"), version)
	}

	if b, err = os.ReadFile(filepath.Join(root, "Makefile")); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "RELEASE_VERSION ?= $(shell cat VERSION)") {
		t.Errorf("the Makefile's RELEASE_VERSION does not come from VERSION")
	}

	got, err := helmTemplate(t)
	if err != nil {
		t.Fatal(err)
	}
	for source, r := range map[string]rendered{"deploy/": kustomize(t, "deploy"), "the chart": got} {
		n := 0
		for key, o := range r {
			for _, image := range capscaleImages(o.raw) {
				n++
				if want := "ghcr.io/capscale/capscale:" + version; image != want {
					t.Errorf("%s: %s pulls %s, want %s", source, key, image, want)
				}
			}
		}
		if n == 0 {
			t.Errorf("%s renders no capscale image", source)
		}
	}
}

// capscaleImages returns the images of obj's pod template (or Job's) that
// are capscale's.
func capscaleImages(obj map[string]any) []string {
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if img, ok := v["image"].(string); ok && strings.HasPrefix(img, "ghcr.io/capscale/capscale:") {
				out = append(out, img)
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(obj)
	return out
}
