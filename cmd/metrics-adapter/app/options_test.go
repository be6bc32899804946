package app

import (
	"context"
	"strings"
	"testing"
	"time"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
)

// harnessArgv is how the e2e harness starts the adapter behind the APIService.
var harnessArgv = []string{
	"--secure-port=6443",
	"--bind-address=127.0.0.1",
	"--tls-cert-file=/run/adapter/tls.crt",
	"--tls-private-key-file=/run/adapter/tls.key",
	"--lister-kubeconfig=/run/kc",
	"--authentication-kubeconfig=/run/kc",
	"--authorization-kubeconfig=/run/kc",
	"--config=/etc/capscale/adapter.yaml",
}

func parse(t *testing.T, argv []string) (*Options, error) {
	t.Helper()
	o := NewOptions()
	cmd := newCommand(context.Background(), o)
	// RunE would start serving; only parse, as cobra does before RunE.
	if err := cmd.ParseFlags(argv); err != nil {
		return nil, err
	}
	return o, nil
}

func TestParseHarnessArgv(t *testing.T) {
	o, err := parse(t, harnessArgv)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if errs := o.Validate(); len(errs) > 0 {
		t.Fatalf("Validate: %v", utilerrors.NewAggregate(errs))
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"secure port", o.SecureServing.BindPort, 6443},
		{"bind address", o.SecureServing.BindAddress.String(), "127.0.0.1"},
		{"cert file", o.SecureServing.ServerCert.CertKey.CertFile, "/run/adapter/tls.crt"},
		{"key file", o.SecureServing.ServerCert.CertKey.KeyFile, "/run/adapter/tls.key"},
		{"lister kubeconfig", o.RemoteKubeConfigFile, "/run/kc"},
		{"authentication kubeconfig", o.Authentication.RemoteKubeConfigFile, "/run/kc"},
		{"authorization kubeconfig", o.Authorization.RemoteKubeConfigFile, "/run/kc"},
		{"config", o.ConfigFile, "/etc/capscale/adapter.yaml"},
		{"config check interval default", o.ConfigCheckInterval, 5 * time.Second},
		{"name", o.Name, "capscale-metrics-adapter"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name    string
		argv    []string
		wantErr string
	}{
		{name: "bad interval", argv: []string{"--config=x", "--config-check-interval=0s"}, wantErr: "--config-check-interval must be positive"},
		{name: "bad port", argv: []string{"--config=x", "--secure-port=70000"}, wantErr: "secure-port"},
		{name: "bad delegate routing", argv: []string{"--delegate-routing=dns"}, wantErr: "--delegate-routing must be"},
		{name: "zero delegate timeout", argv: []string{"--delegate-timeout=0s"}, wantErr: "--delegate-timeout must be positive"},
		{name: "zero delegate body", argv: []string{"--delegate-max-response-bytes=0"}, wantErr: "--delegate-max-response-bytes must be positive"},
		{name: "zero discovery interval", argv: []string{"--delegate-discovery-interval=0s"}, wantErr: "--delegate-discovery-interval must be positive"},
		{name: "KEDA scaler without a certificate", argv: []string{"--keda-scaler-bind-address=:9443", "--keda-scaler-allow-any-client"}, wantErr: "needs a serving certificate"},
		{name: "KEDA scaler without client verification", argv: []string{"--keda-scaler-bind-address=:9443", "--tls-cert-file=a", "--tls-private-key-file=b"}, wantErr: "needs --keda-scaler-client-ca-file"},
		{name: "KEDA scaler: both client modes", argv: []string{"--keda-scaler-bind-address=:9443", "--tls-cert-file=a", "--tls-private-key-file=b", "--keda-scaler-client-ca-file=ca", "--keda-scaler-allow-any-client"}, wantErr: "exclude each other"},
		{name: "KEDA scaler: cert without key", argv: []string{"--keda-scaler-bind-address=:9443", "--keda-scaler-tls-cert-file=a", "--keda-scaler-client-ca-file=ca"}, wantErr: "go together"},
		{name: "KEDA scaler: bad address", argv: []string{"--keda-scaler-bind-address=9443", "--tls-cert-file=a", "--tls-private-key-file=b", "--keda-scaler-client-ca-file=ca"}, wantErr: "--keda-scaler-bind-address"},
		{name: "KEDA scaler: no streams", argv: []string{"--keda-scaler-bind-address=:9443", "--tls-cert-file=a", "--tls-private-key-file=b", "--keda-scaler-client-ca-file=ca", "--keda-scaler-max-streams=0"}, wantErr: "--keda-scaler-max-streams must be at least 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parse(t, tc.argv)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			err = utilerrors.NewAggregate(o.Validate())
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Validate() = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}

	if _, err := parse(t, []string{"--no-such-flag"}); err == nil {
		t.Error("unknown flag: want a parse error")
	}
	if _, err := parse(t, []string{"--config-check-interval=soon"}); err == nil {
		t.Error("bad duration: want a parse error")
	}
}

func TestHelpListsFlags(t *testing.T) {
	cmd := NewCommand(context.Background())
	usage := cmd.UsageString()
	for _, f := range []string{"--config", "--config-check-interval", "--secure-port", "--cert-dir", "--tls-cert-file",
		"--tls-private-key-file", "--lister-kubeconfig", "--authentication-kubeconfig", "--authorization-kubeconfig", "--bind-address"} {
		if !strings.Contains(usage, f) {
			t.Errorf("usage lacks %s", f)
		}
	}
}

func TestKEDAScalerFlags(t *testing.T) {
	o, err := parse(t, append(harnessArgv, "--keda-scaler-bind-address=127.0.0.1:9443", "--keda-scaler-client-ca-file=/run/keda/ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if errs := o.Validate(); len(errs) > 0 {
		t.Fatalf("Validate: %v", utilerrors.NewAggregate(errs))
	}
	// The scaler serves the API server's certificate unless given its own.
	if cert, key := o.kedaScalerCertKey(); cert != "/run/adapter/tls.crt" || key != "/run/adapter/tls.key" {
		t.Errorf("scaler certificate = %s, %s; want the API server's", cert, key)
	}
	if o.KEDAScalerStreamInterval != 5*time.Second || o.KEDAScalerMaxStreams != 1000 {
		t.Errorf("defaults: interval %s, max streams %d", o.KEDAScalerStreamInterval, o.KEDAScalerMaxStreams)
	}
	off, err := parse(t, harnessArgv)
	if err != nil {
		t.Fatal(err)
	}
	if off.KEDAScalerBindAddress != "" {
		t.Errorf("the KEDA scaler is on by default (%q)", off.KEDAScalerBindAddress)
	}
}

func TestConfigIsOptional(t *testing.T) {
	o, err := parse(t, []string{"--secure-port=6443"})
	if err != nil {
		t.Fatal(err)
	}
	if errs := o.Validate(); len(errs) > 0 {
		t.Errorf("Validate without --config: %v", utilerrors.NewAggregate(errs))
	}
}

func TestPreflightFlagConflicts(t *testing.T) {
	tests := []struct {
		name string
		o    preflightOptions
		want string
	}{
		{name: "replace and delegate", o: preflightOptions{replace: true, delegate: true}, want: "exclude each other"},
		{name: "delegate and restore", o: preflightOptions{delegate: true, restore: true}, want: "exclude each other"},
		{name: "CA without delegate", o: preflightOptions{caBundleFile: "ca.crt"}, want: "go with --delegate"},
		{name: "dry run of a check", o: preflightOptions{dryRun: true}, want: "--dry-run goes with"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.o.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("validate() = %v, want %q", err, tc.want)
			}
		})
	}
	ok := preflightOptions{delegate: true, dryRun: true, delegateCAFile: "a", caBundleFile: "b"}
	if err := ok.validate(); err != nil {
		t.Errorf("valid flags: %v", err)
	}
}
