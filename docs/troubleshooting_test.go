package docs

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTroubleshootingEveryMode: operations.md's troubleshooting row for
// underlay pods Pending says what to look at in each scheduling mode the
// chart offers (its values schema's extender.mode), not only in one.
func TestTroubleshootingEveryMode(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "deploy", "helm", "capscale", "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Extender struct {
				Properties struct {
					Mode struct {
						Enum []string `json:"enum"`
					} `json:"mode"`
				} `json:"properties"`
			} `json:"extender"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	modes := schema.Properties.Extender.Properties.Mode.Enum
	if len(modes) == 0 {
		t.Fatal("values.schema.json has no extender.mode enum")
	}
	ops, err := os.ReadFile("operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for _, line := range strings.Split(string(ops), "\n") {
		if strings.HasPrefix(line, "| Underlay pods Pending |") {
			row = strings.ToLower(line)
		}
	}
	if row == "" {
		t.Fatal("operations.md has no troubleshooting row for underlay pods Pending")
	}
	for _, m := range modes {
		if !strings.Contains(row, "**"+m+" mode**") {
			t.Errorf("operations.md's row for underlay pods Pending says nothing for %s mode (**%s mode**)", m, m)
		}
	}
}
