package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/capscale/capscale/controller/capacitysource"
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

// TestPresetLists: where a comment lists the capacity-source presets (the
// sentence after the word preset, when it names one), it lists every preset
// capscale-controller has, so no reader takes four of five for the whole
// set.
func TestPresetLists(t *testing.T) {
	presets := capacitysource.PresetNames()
	const anchor = "preset"
	for _, file := range []string{"helm/capscale/values.yaml", "capacity-sources/sources.yaml"} {
		text := oneLine(string(mustRead(t, file)))
		lists := 0
		for rest := text; ; {
			i := strings.Index(strings.ToLower(rest), anchor)
			if i < 0 {
				break
			}
			rest = rest[i+len(anchor):]
			list := rest
			if j := strings.Index(list, ". "); j >= 0 {
				list = list[:j]
			}
			if !slices.ContainsFunc(presets, func(p string) bool { return strings.Contains(list, p+",") || strings.Contains(list, p+")") }) {
				continue // not a list
			}
			lists++
			for _, p := range presets {
				if !strings.Contains(list, p) {
					t.Errorf("%s: the preset list %q lacks %s", file, list, p)
				}
			}
		}
		if lists == 0 {
			t.Errorf("%s: no list of the presets", file)
		}
	}
}

// TestImageBinaries: values.yaml's image comment names the binaries the
// image holds, one per directory of cmd/ (make image builds ./cmd/... and
// cmd/capscale-scheduler).
func TestImageBinaries(t *testing.T) {
	entries, err := os.ReadDir(filepath.Join(repoRoot(t), "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, e := range entries {
		if e.IsDir() {
			want = append(want, "/"+e.Name())
		}
	}
	values := oneLine(string(mustRead(t, "helm/capscale/values.yaml")))
	i := strings.Index(values, "The image with")
	j := strings.Index(values, "image: ")
	if i < 0 || j < i {
		t.Fatal("values.yaml has no comment on image")
	}
	comment := values[i:j]
	got := regexp.MustCompile(`/[a-z][a-z-]*[a-z]\b`).FindAllString(comment, -1)
	got = slices.DeleteFunc(got, func(s string) bool { return strings.HasPrefix(s, "/capscale-scheduler-") })
	slices.Sort(got)
	got = slices.Compact(got)
	if !slices.Equal(got, want) {
		t.Errorf("values.yaml's image comment names %v; the image holds %v (cmd/)", got, want)
	}
	counts := []string{"no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"}
	if n := len(want); n >= len(counts) || !strings.Contains(comment, counts[n]+" binaries") {
		t.Errorf("values.yaml's image comment %q does not say %d binaries", comment, n)
	}
}
