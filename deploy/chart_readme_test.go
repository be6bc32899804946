package deploy

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/capscale/capscale/hack/chartreadme"
)

// TestChartReadmeValues: the values table of the chart's README is the one
// values.yaml and its comments give, so that it cannot drift from the file.
func TestChartReadmeValues(t *testing.T) {
	root := repoRoot(t)
	values := mustRead(t, filepath.Join(root, chartreadme.ValuesPath))
	readme := mustRead(t, filepath.Join(root, chartreadme.ReadmePath))
	table, err := chartreadme.Table(values)
	if err != nil {
		t.Fatal(err)
	}
	want, err := chartreadme.Rewrite(readme, table)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != string(readme) {
		t.Errorf("%s's values table is out of date with values.yaml: run go run ./hack/genchartreadme", chartreadme.ReadmePath)
	}
	if _, err := os.Stat(filepath.Join(root, "hack", "genchartreadme", "main.go")); err != nil {
		t.Errorf("the generator the message names is gone: %v", err)
	}
}
