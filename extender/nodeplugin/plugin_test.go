package nodeplugin

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func dial(t *testing.T, socket string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// TestRun plays the kubelet against Run: it finds the registration
// socket in the registry directory, learns the driver and its endpoint,
// and prepares and unprepares a claim over gRPC, as
// pkg/kubelet/cm/dra does; the claim is read with the plugin's client.
func TestRun(t *testing.T) {
	// A short base: unix socket paths are at most 108 bytes.
	base, err := os.MkdirTemp("", "np")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	reg, dir := filepath.Join(base, "plugins_registry"), filepath.Join(base, "plugins", Driver)
	if err := os.MkdirAll(reg, 0o750); err != nil {
		t.Fatal(err)
	}
	c := claim("uid-1", [3]string{Driver, "n1", "ip-3"}, [3]string{Driver, "n1", "ip-5"})
	client := fake.NewClientset(c)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	addr := make(chan net.Addr, 1)
	go func() {
		done <- Run(ctx, Config{Client: client, NodeName: "n1", RegistryDir: reg, PluginDir: dir,
			HealthAddress: "127.0.0.1:0", HealthListening: func(a net.Addr) { addr <- a }})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run after its context ended: %v", err)
		}
	}()
	readyz := "http://" + (<-addr).String() + "/readyz"

	regSocket := filepath.Join(reg, Driver+"-reg.sock")
	var info *registerapi.PluginInfo
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		if _, err := os.Stat(regSocket); err != nil {
			return false, nil
		}
		info, err = registerapi.NewRegistrationClient(dial(t, regSocket)).GetInfo(ctx, &registerapi.InfoRequest{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("no registration socket answering at %s: %v", regSocket, err)
	}
	// Not Ready until the kubelet says it registered the plugin: the
	// device publisher holds the node's devices back until then.
	if code := get(t, readyz); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before the kubelet's answer: %d, want 503", code)
	}
	if _, err := registerapi.NewRegistrationClient(dial(t, regSocket)).NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Errorf("NotifyRegistrationStatus: %v", err)
	}
	if code := get(t, readyz); code != http.StatusOK {
		t.Errorf("/readyz once registered: %d, want 200", code)
	}
	if info.Type != registerapi.DRAPlugin || info.Name != Driver || info.Endpoint != filepath.Join(dir, "dra.sock") ||
		!slices.Contains(info.SupportedVersions, drapbv1.DRAPluginService) {
		t.Errorf("registration %+v: want a DRA plugin %s serving %s at %s", info, Driver, drapbv1.DRAPluginService, filepath.Join(dir, "dra.sock"))
	}
	if slices.ContainsFunc(info.SupportedVersions, func(s string) bool { return s != drapbv1.DRAPluginService && s != "v1beta1.DRAPlugin" }) {
		t.Errorf("registration offers %v: an IP has no health service", info.SupportedVersions)
	}

	dra := drapbv1.NewDRAPluginClient(dial(t, info.Endpoint))
	want := &drapbv1.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}
	prep, err := dra.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{want}})
	if err != nil {
		t.Fatal(err)
	}
	r := prep.Claims[string(c.UID)]
	if r == nil || r.Error != "" || len(r.Devices) != 2 {
		t.Fatalf("NodePrepareResources: %+v, want two devices and no error", prep.Claims)
	}
	for i, d := range r.Devices {
		if wantName := []string{"ip-3", "ip-5"}[i]; d.PoolName != "n1" || d.DeviceName != wantName || len(d.CdiDeviceIds) > 0 {
			t.Errorf("device %d: %+v, want n1/%s with no CDI device", i, d, wantName)
		}
	}
	unprep, err := dra.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: []*drapbv1.Claim{want}})
	if err != nil {
		t.Fatal(err)
	}
	if u := unprep.Claims[string(c.UID)]; u == nil || u.Error != "" {
		t.Errorf("NodeUnprepareResources: %+v, want the claim done", unprep.Claims)
	}
	// The plugin reads the claims and writes nothing.
	for _, a := range client.Actions() {
		if a.GetVerb() != "get" || a.GetResource().Resource != "resourceclaims" {
			t.Errorf("the plugin called %s %s; it may only get resourceclaims", a.GetVerb(), a.GetResource().Resource)
		}
	}
}

// TestRunRefused: a registration the kubelet refuses ends Run with an
// error that says why (the container exits non-zero and the kubelet
// restarts it, registering afresh), and /readyz never said Ready.
func TestRunRefused(t *testing.T) {
	base, err := os.MkdirTemp("", "np")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	reg := filepath.Join(base, "plugins_registry")
	if err := os.MkdirAll(reg, 0o750); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	addr := make(chan net.Addr, 1)
	go func() {
		done <- Run(ctx, Config{Client: fake.NewClientset(), NodeName: "n1", RegistryDir: reg, PluginDir: filepath.Join(base, "plugins", Driver),
			HealthAddress: "127.0.0.1:0", HealthListening: func(a net.Addr) { addr <- a }})
	}()
	readyz := "http://" + (<-addr).String() + "/readyz"
	regSocket := filepath.Join(reg, Driver+"-reg.sock")
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := os.Stat(regSocket)
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("no registration socket at %s: %v", regSocket, err)
	}
	// The kubelet's words (pluginmanager's operation_generator.go).
	why := "RegisterPlugin error -- plugin validation failed with err: no"
	_, _ = registerapi.NewRegistrationClient(dial(t, regSocket)).NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: false, Error: why})
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "refused the registration") || !strings.Contains(err.Error(), why) {
			t.Errorf("Run after a refusal: %v, want an error saying the kubelet refused it and why", err)
		}
	case <-ctx.Done():
		t.Fatal("Run still running after the kubelet refused the registration")
	}
	if _, err := http.Get(readyz); err == nil {
		t.Errorf("/readyz still answers after Run ended")
	}
}
