package plane

import (
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/capscale/capscale/e2e/nodeimage"
)

func TestRangeOf(t *testing.T) {
	subnet := netip.MustParsePrefix("10.233.4.0/24")
	for _, tc := range []struct {
		name           string
		capacity       int
		gw, start, end string
		wantErr        bool
	}{
		{name: "default", capacity: 10, gw: "10.233.4.1", start: "10.233.4.2", end: "10.233.4.11"},
		{name: "one", capacity: 1, gw: "10.233.4.1", start: "10.233.4.2", end: "10.233.4.2"},
		{name: "largest", capacity: 253, gw: "10.233.4.1", start: "10.233.4.2", end: "10.233.4.254"},
		{name: "zero", capacity: 0, wantErr: true},
		{name: "beyond the /24", capacity: 254, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gw, start, end, err := rangeOf(subnet, tc.capacity)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("capacity %d accepted", tc.capacity)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if gw.String() != tc.gw || start.String() != tc.start || end.String() != tc.end {
				t.Errorf("got %s %s-%s, want %s %s-%s", gw, start, end, tc.gw, tc.start, tc.end)
			}
		})
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/var/lib/kubelet`:         "/var/lib/kubelet",
		`/tmp/a\040b/c`:            "/tmp/a b/c",
		`/tmp/tab\011and\134slash`: "/tmp/tab\tand\\slash",
		`/tmp/trailing\04`:         `/tmp/trailing\04`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestUnderPath(t *testing.T) {
	for _, tc := range []struct {
		p, dir string
		want   bool
	}{
		{"/capscale-ab-0", "/capscale-ab-0", true},
		{"/capscale-ab-0/kubepods/besteffort", "/capscale-ab-0", true},
		{"/capscale-ab-01/kubepods", "/capscale-ab-0", false},
		{"/", "/capscale-ab-0", false},
	} {
		if got := underPath(tc.p, tc.dir); got != tc.want {
			t.Errorf("underPath(%q, %q) = %v, want %v", tc.p, tc.dir, got, tc.want)
		}
	}
}

// TestCheckRealNodeHost: a host without make deps' packages is refused,
// each missing piece named, so that a real-node test fails saying what to
// install instead of skipping.
func TestCheckRealNodeHost(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	err := CheckRealNodeHost(t.TempDir())
	if err == nil {
		t.Fatal("a host with nothing on PATH and no kubelet was accepted")
	}
	for _, want := range []string{"make deps", "containerd", "runc", "ctr", "nft", "kubelet (make control-plane)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not name %q: %v", want, err)
		}
	}
}

// TestRegistryConfig: the node's containerd looks for hosts.toml files in
// its own directory, and a registry's file sends pulls to it over plain
// HTTP.
func TestRegistryConfig(t *testing.T) {
	n := &RealNode{Name: "real-node-0", Dir: t.TempDir(), ContainerdSocket: "/x/containerd.sock"}
	cfg, err := n.containerdConfig()
	if err != nil {
		t.Fatal(err)
	}
	if want := `config_path = "` + n.Dir + `/containerd/certs.d"`; !strings.Contains(string(cfg), want) {
		t.Errorf("containerd's configuration lacks %s:\n%s", want, cfg)
	}
	if err := n.writeRegistryHosts([]string{"127.0.0.1:38211"}); err != nil {
		t.Fatal(err)
	}
	f := n.RegistryHostsFile("127.0.0.1:38211")
	if want := n.Dir + "/containerd/certs.d/127.0.0.1:38211/hosts.toml"; f != want {
		t.Errorf("hosts file %s, want %s", f, want)
	}
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	want := "server = \"http://127.0.0.1:38211\"\n\n[host.\"http://127.0.0.1:38211\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
	if string(b) != want {
		t.Errorf("hosts.toml:\n%s\nwant:\n%s", b, want)
	}
}

func TestCheckRealNodeOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want string // "" for accepted
	}{
		{name: "none", o: Options{}},
		{name: "real nodes with all their options", o: Options{RealNodes: 2, RealNodeCapacities: []int{4, 10}, ServiceNetwork: true, RealNodeRegistries: []string{"127.0.0.1:5000"}}},
		{name: "negative", o: Options{RealNodes: -1}, want: "at least 0"},
		{name: "capacities for other nodes", o: Options{RealNodes: 3, RealNodeCapacities: []int{4, 10}}, want: "2 entries for 3 real nodes"},
		{name: "service network alone", o: Options{ServiceNetwork: true}, want: "need real nodes"},
		{name: "images alone", o: Options{RealNodeImages: make([]nodeimage.Image, 1)}, want: "need real nodes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkRealNodeOptions(tc.o)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}
