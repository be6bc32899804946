package ciliumcheck

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	iputil "github.com/cilium/cilium/pkg/ip"
	"github.com/cilium/cilium/pkg/ipam/service/ipallocator"
	ipamtypes "github.com/cilium/cilium/pkg/ipam/types"
	v2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
)

// Pool is the agent's multi-pool pool: one Cilium IP allocator per CIDR,
// as pkg/ipam/pool.go builds them (cidrRangeOpts: first and last IPs
// allowed or not).
type Pool struct {
	Ranges []*ipallocator.Range
}

// NewPool is a pool of cidrs.
func NewPool(cidrs []netip.Prefix, allowFirstLast bool) *Pool {
	var opts []ipallocator.CIDRRangeOption
	if allowFirstLast {
		opts = append(opts, ipallocator.WithAllowFirstIP(), ipallocator.WithAllowLastIP())
	}
	p := &Pool{}
	for _, c := range cidrs {
		p.Ranges = append(p.Ranges, ipallocator.NewCIDRRange(c, opts...))
	}
	return p
}

// Next allocates the next free IP in the first CIDR that has one, as
// cidrPool.allocateNext does.
func (p *Pool) Next(t testing.TB) netip.Addr {
	t.Helper()
	for _, r := range p.Ranges {
		if r.Free() > 0 {
			a, err := r.AllocateNext()
			if err != nil {
				t.Fatal(err)
			}
			return a
		}
	}
	t.Fatal("all CIDR ranges are exhausted")
	return netip.Addr{}
}

// Free is what the allocator can still hand out.
func (p *Pool) Free() int {
	n := 0
	for _, r := range p.Ranges {
		n += r.Free()
	}
	return n
}

// CIDRs are the pool's CIDRs, sorted, as the agent writes them.
func (p *Pool) CIDRs() []iputil.Prefix {
	out := make([]iputil.Prefix, len(p.Ranges))
	for i, r := range p.Ranges {
		out[i] = iputil.PrefixFrom(r.CIDR())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Prefix.Addr().Less(out[j].Prefix.Addr()) })
	return out
}

// Allocated are the IPs the pool has handed out.
func (p *Pool) Allocated() []netip.Addr {
	var out []netip.Addr
	for _, r := range p.Ranges {
		r.ForEach(func(a netip.Addr) { out = append(out, a) })
	}
	return out
}

// Demand is the "default" pool's request of a multi-pool agent.
func Demand(ipv4 int) []ipamtypes.IPAMPoolRequest {
	return []ipamtypes.IPAMPoolRequest{{Pool: "default", Needed: ipamtypes.IPAMPoolDemand{IPv4Addrs: ipv4}}}
}

var update = flag.Bool("update", false, "also write the CiliumNodes to controller/capacitysource/testdata/ciliumnodes, the fixtures of capscale's unit tests")

// fixtures is where the tests write the CiliumNodes (Main); root is
// controller/capacitysource, relative to the test's directory.
var fixtures, root string

// fixture is one CiliumNode written by Cilium's code, with what Cilium's
// allocator could still give pods on it. capscale's
// TestPresetsOnCiliumWritten (controller/capacitysource) reads them.
type fixture struct {
	Preset      string         `json:"preset"`
	Objects     string         `json:"objects"`
	Allocatable int            `json:"allocatable"`
	Object      *v2.CiliumNode `json:"object"`
}

var unsafe = regexp.MustCompile(`[^a-z0-9]+`)

// Report keeps cn, written by Cilium's code, with what Cilium's allocator
// can still give pods on it, for capscale's presets to be checked on
// (Main says where).
func Report(t testing.TB, preset, objects string, cn *v2.CiliumNode, allocatable int) {
	t.Helper()
	b, err := json.MarshalIndent(fixture{Preset: preset, Objects: objects, Allocatable: allocatable, Object: cn}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	name := preset + "-" + strings.Trim(unsafe.ReplaceAllString(strings.ToLower(objects), "-"), "-") + ".json"
	dirs := []string{fixtures}
	if *update {
		dirs = append(dirs, filepath.Join(root, "testdata", "ciliumnodes"))
	}
	for _, dir := range dirs {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Main runs the tests, which write the CiliumNodes Cilium's code wrote to
// $CAPSCALE_CILIUM_FIXTURES (a fresh directory of the caller's; none: a
// temporary one) and, with -update, to controller/capacitysource/testdata/
// ciliumnodes; rootDir is controller/capacitysource, relative to the test.
// capscale's TestPresetsOnCiliumWritten then runs the presets on them in
// capscale's own module (make test-unit runs both): Cilium v1.20.2 builds
// with k8s.io v0.36 and capscale with v0.37, whose client-go Interface
// changed, so one test binary cannot hold both, and the objects cross the
// modules as JSON, as the mirror reads them.
func Main(m *testing.M, rootDir string) {
	flag.Parse()
	root, fixtures = rootDir, os.Getenv("CAPSCALE_CILIUM_FIXTURES")
	if fixtures == "" {
		dir, err := os.MkdirTemp("", "ciliumcheck")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fixtures = dir
		defer os.RemoveAll(dir)
	}
	if code := m.Run(); code != 0 {
		os.Exit(code)
	}
}
