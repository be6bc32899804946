// Command gendocs rewrites the generated reference tables of docs/ (flags,
// metrics, names; see package docs) from the code. Run it from the
// repository: go run ./hack/gendocs
package main

import (
	"fmt"
	"os"

	"github.com/capscale/capscale/docs"
)

func main() {
	// The metrics adapter's --cert-dir default is under os.TempDir(): pin it
	// so that the page does not depend on who generated it.
	if err := os.Setenv("TMPDIR", "/tmp"); err != nil {
		fmt.Fprintln(os.Stderr, "gendocs:", err)
		os.Exit(1)
	}
	root, err := docs.RepoRoot()
	if err == nil {
		var changed []string
		if changed, err = docs.Update(root); err == nil {
			for _, p := range changed {
				fmt.Println("updated", p)
			}
			return
		}
	}
	fmt.Fprintln(os.Stderr, "gendocs:", err)
	os.Exit(1)
}
