package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestOptions parses real argv and checks that each bad value is refused
// with a message naming its flag.
func TestOptions(t *testing.T) {
	writeFile := func(t *testing.T, content string) string {
		p := filepath.Join(t.TempDir(), "sources.yaml")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name string
		args []string
		want string // "" when valid
	}{
		{name: "defaults", args: nil},
		{name: "no leader election", args: []string{"--leader-elect=false", "--leader-elect-resource-namespace=Not_A_Name"}},
		{name: "bad bind address", args: []string{"--bind-address=8080"}, want: "--bind-address"},
		{name: "no workers", args: []string{"--workers=0"}, want: "--workers"},
		{name: "missing kubeconfig", args: []string{"--kubeconfig=/does/not/exist"}, want: "--kubeconfig"},
		{name: "renew deadline too short", args: []string{"--leader-elect-renew-deadline=2s"}, want: "--leader-elect-renew-deadline"},
		{name: "lease shorter than renew deadline", args: []string{"--leader-elect-lease-duration=5s"}, want: "--leader-elect-lease-duration"},
		{name: "bad lease namespace", args: []string{"--leader-elect-resource-namespace=Not_A_Name"}, want: "--leader-elect-resource-namespace"},
		{name: "tiny retry delay", args: []string{"--max-retry-delay=10ms"}, want: "--max-retry-delay"},
		{name: "capacity sources", args: []string{"--capacity-sources=" + writeFile(t, "sources: [{name: cilium, preset: cilium-eni}]")}},
		{name: "no mirror workers", args: []string{"--capacity-source-workers=0"}, want: "--capacity-source-workers"},
		{name: "zero mirror QPS", args: []string{"--capacity-source-qps=0"}, want: "--capacity-source-qps"},
		{name: "missing capacity sources", args: []string{"--capacity-sources=/does/not/exist"}, want: "--capacity-sources"},
		{name: "capacity source that does not compile", want: "sources[0] (typo): capacity: ",
			args: []string{"--capacity-sources=" + writeFile(t, "sources: [{name: typo, preset: cilium-eni, capacity: 'size(objct)'}]")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			all := pflag.NewFlagSet("controller", pflag.ContinueOnError)
			for _, fs := range o.Flags().FlagSets {
				all.AddFlagSet(fs)
			}
			if err := all.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			var msgs []string
			for _, e := range o.Validate() {
				msgs = append(msgs, e.Error())
			}
			got := strings.Join(msgs, "\n")
			if tc.want == "" && got != "" {
				t.Errorf("want valid, got %s", got)
			}
			if tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("want an error naming %s, got %q", tc.want, got)
			}
		})
	}
}
