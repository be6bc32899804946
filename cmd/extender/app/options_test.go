package app

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capscale/capscale/extender/wire"
	"github.com/spf13/pflag"
)

func parse(t *testing.T, argv ...string) *Options {
	t.Helper()
	o := NewOptions()
	fs := pflag.NewFlagSet("extender", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(argv); err != nil {
		t.Fatalf("parsing %v: %v", argv, err)
	}
	return o
}

func TestOptionsParse(t *testing.T) {
	tests := []struct {
		name  string
		argv  []string
		check func(t *testing.T, o *Options)
	}{
		{
			name: "defaults",
			check: func(t *testing.T, o *Options) {
				if o.BindAddress != "127.0.0.1:8888" || o.Kubeconfig != "" || o.DefaultCapacity != 10 ||
					o.MaxRequestBytes != wire.DefaultMaxRequestBytes || o.ReservationTTL != time.Minute || o.MaxProcs != 1 ||
					o.BinderID != "capscale-scheduler" || o.LeaderElectNamespace != "capscale-system" ||
					o.PublishQPS != 200 || o.PublishBurst != 400 || o.PublishWorkers != 16 {
					t.Errorf("defaults: %+v", o)
				}
			},
		},
		{
			name: "what the e2e harness passes",
			argv: []string{"--bind-address=127.0.0.1:18888", "--kubeconfig=/tmp/kubeconfig"},
			check: func(t *testing.T, o *Options) {
				if o.BindAddress != "127.0.0.1:18888" || o.Kubeconfig != "/tmp/kubeconfig" {
					t.Errorf("got %+v", o)
				}
			},
		},
		{
			name: "every flag",
			argv: []string{"--bind-address", "0.0.0.0:9443", "--default-capacity=3", "--tls-cert-file=c.pem",
				"--tls-private-key-file=k.pem", "--max-request-bytes=2048", "--reservation-ttl=30s", "--shutdown-timeout=5s", "--max-procs=0", "-v=4"},
			check: func(t *testing.T, o *Options) {
				if o.BindAddress != "0.0.0.0:9443" || o.DefaultCapacity != 3 || o.TLSCertFile != "c.pem" || o.TLSPrivateKeyFile != "k.pem" ||
					o.MaxRequestBytes != 2048 || o.ReservationTTL != 30*time.Second || o.ShutdownTimeout != 5*time.Second || o.MaxProcs != 0 || o.Logs.Verbosity != 4 {
					t.Errorf("got %+v", o)
				}
				if errs := o.Validate(); len(errs) > 0 {
					t.Errorf("Validate: %v", errs)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, parse(t, tc.argv...)) })
	}
}

func TestOptionsValidate(t *testing.T) {
	sources := filepath.Join(t.TempDir(), "sources.yaml")
	typo := filepath.Join(t.TempDir(), "typo.yaml")
	if err := os.WriteFile(sources, []byte("sources: [{name: cilium, preset: cilium-eni}]"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(typo, []byte("sources: [{name: typo, preset: cilium-eni, capacity: 'size(objct)'}]"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		argv []string
		want []string
	}{
		{name: "defaults are valid"},
		{name: "zero capacity is allowed", argv: []string{"--default-capacity=0"}},
		{name: "negative capacity", argv: []string{"--default-capacity=-1"}, want: []string{"--default-capacity must be >= 0"}},
		{name: "cert without key", argv: []string{"--tls-cert-file=c.pem"}, want: []string{"must be set together"}},
		{name: "key without cert", argv: []string{"--tls-private-key-file=k.pem"}, want: []string{"must be set together"}},
		{name: "address without port", argv: []string{"--bind-address=127.0.0.1"}, want: []string{"--bind-address"}},
		{name: "bad port", argv: []string{"--bind-address=127.0.0.1:99999"}, want: []string{"invalid port"}},
		{name: "host name", argv: []string{"--bind-address=example.com:80"}, want: []string{"IP address"}},
		{name: "tiny body limit", argv: []string{"--max-request-bytes=10"}, want: []string{"--max-request-bytes"}},
		{name: "no ttl", argv: []string{"--reservation-ttl=0s"}, want: []string{"--reservation-ttl"}},
		{name: "bad probe address", argv: []string{"--probe-bind-address=:x"}, want: []string{"--probe-bind-address"}},
		{name: "zero qps", argv: []string{"--kube-api-qps=0"}, want: []string{"--kube-api-qps"}},
		{name: "zero burst", argv: []string{"--kube-api-burst=0"}, want: []string{"--kube-api-burst"}},
		{name: "the publisher's own rate", argv: []string{"--publish-capacity", "--publish-qps=500", "--publish-burst=1000", "--publish-workers=32"}},
		{name: "zero publish qps", argv: []string{"--publish-qps=0"}, want: []string{"--publish-qps must be positive"}},
		{name: "zero publish burst", argv: []string{"--publish-burst=0"}, want: []string{"--publish-burst at least 1"}},
		{name: "no publish workers", argv: []string{"--publish-workers=0"}, want: []string{"--publish-workers must be between 1 and 256"}},
		{name: "absurd publish workers", argv: []string{"--publish-workers=1000"}, want: []string{"--publish-workers"}},
		{name: "Go's own GOMAXPROCS", argv: []string{"--max-procs=0"}},
		{name: "negative max procs", argv: []string{"--max-procs=-1"}, want: []string{"--max-procs"}},
		{name: "absurd max procs", argv: []string{"--max-procs=100000"}, want: []string{"--max-procs"}},
		{name: "another binder ID", argv: []string{"--binder-id=default-scheduler"}},
		{name: "empty binder ID", argv: []string{"--binder-id="}, want: []string{"--binder-id must be 1 to 128 characters"}},
		{name: "long binder ID", argv: []string{"--binder-id=" + strings.Repeat("x", 129)}, want: []string{"--binder-id"}},
		{name: "no lease namespace", argv: []string{"--leader-elect-namespace="}, want: []string{"--leader-elect-namespace"}},
		{name: "the kubelet plugin gate", argv: []string{"--publish-devices", "--kubelet-plugin-selector=app.kubernetes.io/name=capscale-dra-kubelet-plugin", "--kubelet-plugin-namespace=ns"}},
		{name: "the gate without devices", argv: []string{"--kubelet-plugin-selector=app=x"}, want: []string{"--kubelet-plugin-selector gates the devices --publish-devices"}},
		{name: "the gate with the alpha path", argv: []string{"--publish-devices", "--skip-node-operations", "--kubelet-plugin-selector=app=x"}, want: []string{"set one of them"}},
		{name: "a bad selector", argv: []string{"--publish-devices", "--kubelet-plugin-selector=app in (x"}, want: []string{"--kubelet-plugin-selector:"}},
		{name: "the gate with no namespace", argv: []string{"--publish-devices", "--kubelet-plugin-selector=app=x", "--kubelet-plugin-namespace="}, want: []string{"--kubelet-plugin-namespace"}},
		{name: "the publisher reads the sources", argv: []string{"--publish-capacity", "--await-capacity-source", "--capacity-sources=" + sources}},
		{name: "extender mode reads the sources", argv: []string{"--await-capacity-source", "--capacity-sources=" + sources}},
		{name: "the sources without the wait", argv: []string{"--publish-capacity", "--capacity-sources=" + sources}, want: []string{"it needs --await-capacity-source"}},
		{name: "the sources in DRA mode", argv: []string{"--publish-devices", "--await-capacity-source", "--capacity-sources=" + sources}, want: []string{"--capacity-sources and --publish-devices exclude each other"}},
		{name: "no sources file", argv: []string{"--publish-capacity", "--await-capacity-source", "--capacity-sources=/does/not/exist"}, want: []string{"--capacity-sources: "}},
		{name: "a source that does not compile", argv: []string{"--publish-capacity", "--await-capacity-source", "--capacity-sources=" + typo}, want: []string{"--capacity-sources: "}},
		{name: "bad log format", argv: []string{"--logging-format=xml"}, want: []string{"format"}},
		{
			name: "every error at once",
			argv: []string{"--default-capacity=-5", "--tls-cert-file=c", "--shutdown-timeout=-1s"},
			want: []string{"--default-capacity", "--tls-cert-file", "--shutdown-timeout"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			errs := parse(t, tc.argv...).Validate()
			if len(errs) != len(tc.want) {
				t.Fatalf("Validate = %v, want %d errors %v", errs, len(tc.want), tc.want)
			}
			for i, want := range tc.want {
				if !strings.Contains(errs[i].Error(), want) {
					t.Errorf("error %d = %q, want it to contain %q", i, errs[i], want)
				}
			}
		})
	}
}

func TestCommandRejectsInvalidOptions(t *testing.T) {
	cmd := NewCommand(context.Background())
	cmd.SetArgs([]string{"--default-capacity=-1", "--bind-address=127.0.0.1:0"})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), "--default-capacity") {
		t.Fatalf("Execute = %v, want the validation error", err)
	}
	cmd = NewCommand(context.Background())
	cmd.SetArgs([]string{"--no-such-flag"})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	if err := cmd.Execute(); err == nil {
		t.Fatal("unknown flag accepted")
	}
}
