package docs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// publishedRegistry is where the README once said the chart was published.
const publishedRegistry = "oci://ghcr.io/"

// TestNoUnpublishedChart: no page tells a reader to install the chart from
// a registry this repository does not push to. Nothing here publishes (no
// workflow pushes to ghcr.io): users run `make release REGISTRY=…` and
// install from their own registry, so a page that names ghcr.io's chart
// sends them to nothing.
func TestNoUnpublishedChart(t *testing.T) {
	root := ".."
	workflows, _ := filepath.Glob(filepath.Join(root, ".github", "workflows", "*.y*ml"))
	for _, w := range workflows {
		if b, err := os.ReadFile(w); err == nil && strings.Contains(string(b), "ghcr.io") {
			return // a release workflow pushes there
		}
	}
	for _, f := range markdownFiles(t, root) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, publishedRegistry) {
				t.Errorf("%s:%d names %s, where no workflow of this repository publishes: say `make release REGISTRY=…` instead\n%s", f, i+1, publishedRegistry, line)
			}
		}
	}
}
