package deploy

import (
	"regexp"
	"strings"
	"testing"

	"github.com/capscale/capscale/internal/underlay"
)

// oneLine joins text's lines, without YAML comment marks, into single
// spaces: wording wrapped in a comment or a template reads as one line.
func oneLine(text string) string {
	text = regexp.MustCompile(`(?m)^\s*#`).ReplaceAllString(text, "")
	return strings.Join(strings.Fields(text), " ")
}

// TestCapacityRuleWording: the chart's NOTES.txt states the capacity rule
// and values.yaml's extender.defaultCapacity says which nodes the default is
// for, both in internal/underlay's one wording (the help texts' too), with
// capacity sources in it.
func TestCapacityRuleWording(t *testing.T) {
	notes := oneLine(string(mustRead(t, "helm/capscale/templates/NOTES.txt")))
	if !strings.Contains(notes, underlay.CapacityRuleText) {
		t.Errorf("NOTES.txt does not state the capacity rule as internal/underlay does:\n%s", underlay.CapacityRuleText)
	}
	values := string(mustRead(t, "helm/capscale/values.yaml"))
	i := strings.Index(values, "  defaultCapacity:")
	if i < 0 {
		t.Fatal("values.yaml has no extender.defaultCapacity")
	}
	// The comment block right above the key.
	lines := strings.Split(values[:i], "\n")
	var comment []string
	for j := len(lines) - 2; j >= 0 && strings.HasPrefix(strings.TrimSpace(lines[j]), "#"); j-- {
		comment = append([]string{lines[j]}, comment...)
	}
	if c := oneLine(strings.Join(comment, "\n")); !strings.Contains(c, underlay.DefaultCapacityText) {
		t.Errorf("values.yaml's extender.defaultCapacity comment %q does not say %q", c, underlay.DefaultCapacityText)
	}
}
