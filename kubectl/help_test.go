package kubectl

import (
	"regexp"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/capscale/capscale/internal/underlay"
	"github.com/capscale/capscale/workload/lifecycle"
)

// TestVerbHelpOffersWhatItTakes: every TYPE a verb's help names, short
// names included, is one the verb accepts (stop, start, scale and max
// refuse DaemonSets, so their help must not offer ds).
func TestVerbHelpOffersWhatItTakes(t *testing.T) {
	s := &session{flags: genericclioptions.NewConfigFlags(false), streams: genericclioptions.NewTestIOStreamsDiscard()}
	kinds := map[string][]lifecycle.Kind{"stop": lifecycle.Scalable, "start": lifecycle.Scalable, "scale": lifecycle.Scalable,
		"max": lifecycle.Scalable, "restart": lifecycle.Restartable}
	typeLine := regexp.MustCompile(`TYPE is one of (.*) \(or (.*)\)\.`)
	for _, cmd := range newVerbCommands(s) {
		verb := strings.Fields(cmd.Use)[0]
		m := typeLine.FindStringSubmatch(cmd.Long)
		if m == nil {
			t.Errorf("%s: help names no TYPE:\n%s", verb, cmd.Long)
			continue
		}
		offered := append(strings.Split(m[1], ", "), strings.Split(m[2], ", ")...)
		for _, typ := range offered {
			if _, err := parseWorkload([]string{typ + "/web"}, kinds[verb], "default"); err != nil {
				t.Errorf("%s offers %s, which it refuses: %v", verb, typ, err)
			}
		}
	}
}

// TestCapacityRuleInHelp: ips' help and every --default-capacity say the
// capacity rule in the one wording of internal/underlay, capacity sources
// included.
func TestCapacityRuleInHelp(t *testing.T) {
	s := &session{flags: genericclioptions.NewConfigFlags(false), streams: genericclioptions.NewTestIOStreamsDiscard()}
	root := newCommand(s)
	ips, _, err := root.Find([]string{"ips"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(strings.Fields(ips.Long), " "), underlay.CapacityRuleText) {
		t.Errorf("ips --help does not state the capacity rule %q:\n%s", underlay.CapacityRuleText, ips.Long)
	}
	for _, name := range []string{"ips", "max"} {
		c, _, err := root.Find([]string{name})
		if err != nil {
			t.Fatal(err)
		}
		if f := c.Flags().Lookup("default-capacity"); f == nil || !strings.Contains(f.Usage, underlay.DefaultCapacityText) {
			t.Errorf("%s --default-capacity: %v, want %q", name, f, underlay.DefaultCapacityText)
		}
	}
}
