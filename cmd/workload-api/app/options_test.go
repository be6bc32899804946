package app

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/capscale/capscale/internal/underlay"
)

// parse runs argv through the real flag sets, as the command does.
func parse(t *testing.T, argv ...string) *Options {
	t.Helper()
	o := NewOptions()
	fs := pflag.NewFlagSet("workload-api", pflag.ContinueOnError)
	for _, f := range o.Flags().FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(argv); err != nil {
		t.Fatalf("parsing %q: %v", argv, err)
	}
	return o
}

func TestDefaults(t *testing.T) {
	o := parse(t)
	if o.BindAddress != ":8443" || o.Kubeconfig != "" || o.MaxRequestsInflight != 64 || o.APIServerQPS != 50 || o.APIServerBurst != 100 ||
		o.DefaultUnderlayIPCapacity != 10 || o.MaxBodyBytes != 1<<20 || o.ShutdownTimeout != 10*time.Second {
		t.Errorf("defaults %+v", o)
	}
	if errs := o.Validate(); len(errs) != 0 {
		t.Errorf("defaults do not validate: %v", errs)
	}
}

func TestParseAndValidate(t *testing.T) {
	dir := t.TempDir()
	file := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cert, key, kc := file("tls.crt"), file("tls.key"), file("kubeconfig")

	tests := []struct {
		name     string
		argv     []string
		check    func(*Options) bool
		wantErrs []string // substrings, one per expected error
	}{
		{
			name: "the e2e harness's command line",
			argv: []string{"--bind-address=127.0.0.1:18443", "--kubeconfig=" + kc, "--tls-cert-file=" + cert, "--tls-private-key-file=" + key},
			check: func(o *Options) bool {
				return o.BindAddress == "127.0.0.1:18443" && o.Kubeconfig == kc && o.TLSCertFile == cert && o.TLSPrivateKeyFile == key
			},
		},
		{
			name: "tuning flags",
			argv: []string{"--max-requests-inflight=8", "--apiserver-qps=5.5", "--apiserver-burst=7", "--default-underlay-ip-capacity=32", "--max-body-bytes=65536", "--shutdown-timeout=2s", "-v=4"},
			check: func(o *Options) bool {
				return o.MaxRequestsInflight == 8 && o.APIServerQPS == 5.5 && o.APIServerBurst == 7 && o.DefaultUnderlayIPCapacity == 32 && o.MaxBodyBytes == 65536 &&
					o.ShutdownTimeout == 2*time.Second && o.Logs.Verbosity == 4
			},
		},
		{name: "IPv6 bind address", argv: []string{"--bind-address=[::1]:8443"}},
		{name: "bind address without port", argv: []string{"--bind-address=127.0.0.1"}, wantErrs: []string{"--bind-address"}},
		{name: "bind address with a name", argv: []string{"--bind-address=example.com:80"}, wantErrs: []string{"--bind-address"}},
		{name: "cert without key", argv: []string{"--tls-cert-file=" + cert}, wantErrs: []string{"together"}},
		{name: "missing files", argv: []string{"--tls-cert-file=/nonexistent/crt", "--tls-private-key-file=" + key, "--kubeconfig=/nonexistent/kc"}, wantErrs: []string{"--tls-cert-file", "--kubeconfig"}},
		{
			name:     "bad numbers",
			argv:     []string{"--max-requests-inflight=0", "--apiserver-qps=0", "--apiserver-burst=0", "--default-underlay-ip-capacity=0", "--max-body-bytes=10", "--shutdown-timeout=0s"},
			wantErrs: []string{"--max-requests-inflight", "--apiserver-qps", "--apiserver-burst", "--default-underlay-ip-capacity", "--max-body-bytes", "--shutdown-timeout"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := parse(t, tc.argv...)
			if tc.check != nil && !tc.check(o) {
				t.Errorf("parsed %+v", o)
			}
			errs := o.Validate()
			if len(errs) != len(tc.wantErrs) {
				t.Fatalf("Validate() = %v, want %d errors", errs, len(tc.wantErrs))
			}
			for i, want := range tc.wantErrs {
				if !strings.Contains(errs[i].Error(), want) {
					t.Errorf("error %d = %q, want it to mention %q", i, errs[i], want)
				}
			}
		})
	}
}

func TestCommandRejectsBadFlags(t *testing.T) {
	cmd := NewCommand(context.Background())
	cmd.SetArgs([]string{"--bind-address=nope"})
	cmd.SetOut(new(strings.Builder))
	cmd.SetErr(new(strings.Builder))
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "--bind-address") {
		t.Errorf("Execute() = %v, want a --bind-address error", err)
	}
	cmd = NewCommand(context.Background())
	cmd.SetArgs([]string{"--no-such-flag"})
	cmd.SetOut(new(strings.Builder))
	cmd.SetErr(new(strings.Builder))
	if err := cmd.Execute(); err == nil {
		t.Error("an unknown flag was accepted")
	}
}

// TestConfigBuildsTheServer: Config wires the server from a kubeconfig
// without calling the apiserver; the handler answers before Run starts
// anything.
func TestConfigBuildsTheServer(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	o := parse(t, "--kubeconfig="+kc)
	c, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	if c.Options != o || c.Informers == nil || c.Server == nil {
		t.Fatalf("Config() = %+v", c)
	}
	rec := httptest.NewRecorder()
	c.Server.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("/healthz = %d", rec.Code)
	}
}

// TestDefaultCapacityHelp: the flag says which nodes the default is for in
// the capacity rule's one wording (capacity sources included).
func TestDefaultCapacityHelp(t *testing.T) {
	for _, fs := range NewOptions().Flags().FlagSets {
		if f := fs.Lookup("default-underlay-ip-capacity"); f != nil {
			if !strings.Contains(f.Usage, underlay.DefaultCapacityText) {
				t.Errorf("--default-underlay-ip-capacity: %q, want %q", f.Usage, underlay.DefaultCapacityText)
			}
			return
		}
	}
	t.Fatal("no --default-underlay-ip-capacity")
}
