//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/capscale/capscale/e2e/plane"
)

// toolBin is the path of a tool that make builds into plane.ToolDir
// (helm, kube-scheduler, ...). capscale's own commands are refused: make
// test builds none of them there (TestMain builds them into capscaleBin),
// so a test that ran a stale one from an earlier make build passed here
// and failed on a fresh machine.
func toolBin(t *testing.T, name string) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(plane.RepoRoot(), "cmd", name)); err == nil {
		t.Fatalf("%s is capscale's own command: take it from capscaleBin, which this run built", name)
	}
	bin := filepath.Join(plane.ToolDir(), name)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is not in %s (make control-plane, make deploy-tools): %v", name, plane.ToolDir(), err)
	}
	return bin
}
