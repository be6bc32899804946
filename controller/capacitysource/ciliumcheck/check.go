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
	// Removed are CIDRs the agent's source no longer carries while an IP
	// of theirs is in use: kept, and advertised, but never allocated from
	// (pool.go:260-330 updatePool, 89-104 allocateNext).
	Removed map[netip.Prefix]bool
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

// Next allocates the next free IP in the first CIDR that has one and is
// not removed, as cidrPool.allocateNext does.
func (p *Pool) Next(t testing.TB) netip.Addr {
	t.Helper()
	for _, r := range p.Ranges {
		if r.Free() > 0 && !p.Removed[r.CIDR()] {
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

// Free is what the allocator can still hand out: a removed CIDR's free
// IPs are not (pool.go:160-175 dump counts them out too).
func (p *Pool) Free() int {
	n := 0
	for _, r := range p.Ranges {
		if !p.Removed[r.CIDR()] {
			n += r.Free()
		}
	}
	return n
}

// Update is the agent reading its CIDRs again from their source (in ENI
// mode status.eni.enis, pkg/ipam/eni.go:588-640), as cidrPool.updatePool
// does (pool.go:260-330): a CIDR gone from the source leaves the pool when
// none of its IPs is in use and is marked removed otherwise; a new one
// joins the pool.
func (p *Pool) Update(cidrs []netip.Prefix, allowFirstLast bool) {
	carried := map[netip.Prefix]bool{}
	for _, c := range cidrs {
		carried[c] = true
	}
	var kept []*ipallocator.Range
	have := map[netip.Prefix]bool{}
	for _, r := range p.Ranges {
		if !carried[r.CIDR()] {
			if r.Used() == 0 {
				continue
			}
			if p.Removed == nil {
				p.Removed = map[netip.Prefix]bool{}
			}
			p.Removed[r.CIDR()] = true
		}
		kept = append(kept, r)
		have[r.CIDR()] = true
	}
	for _, c := range NewPool(cidrs, allowFirstLast).Ranges {
		if !have[c.CIDR()] {
			kept = append(kept, c)
		}
	}
	p.Ranges = kept
}

// ReleaseExcess drops the CIDRs the agent gives back once its pods no
// longer need them, as cidrPool.releaseExcessCIDRsMultiPool does
// (pool.go:195-258, called from multipool_manager.go:644-656 with what
// must stay free: the pre-allocate, in ENI mode's linear demand,
// multipool_manager.go:560-575): walking the CIDRs from the last, an
// unused one goes while what stays free is still at least freeNeeded.
// The agent then advertises only what is left (multipool_manager.go:657
// inUseCIDRs).
// Like the agent, it counts a removed CIDR's free IPs as free here.
func (p *Pool) ReleaseExcess(freeNeeded int) {
	free := 0
	for _, r := range p.Ranges {
		free += r.Free()
	}
	var kept []*ipallocator.Range
	for i := len(p.Ranges) - 1; i >= 0; i-- {
		r := p.Ranges[i]
		if r.Used() == 0 && free-r.Free() >= freeNeeded {
			free -= r.Free()
			continue
		}
		kept = append([]*ipallocator.Range{r}, kept...)
	}
	p.Ranges = kept
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
	Preset      string `json:"preset"`
	Objects     string `json:"objects"`
	Allocatable int    `json:"allocatable"`
	// Under is how far the preset may stay under Allocatable, and why: IPs
	// the agent holds that the object does not show (never over).
	Under    int            `json:"under,omitempty"`
	UnderWhy string         `json:"underWhy,omitempty"`
	Object   *v2.CiliumNode `json:"object"`
}

var unsafe = regexp.MustCompile(`[^a-z0-9]+`)

// Report keeps cn, written by Cilium's code, with what Cilium's allocator
// can still give pods on it, for capscale's presets to be checked on
// (Main says where).
func Report(t testing.TB, preset, objects string, cn *v2.CiliumNode, allocatable int) {
	t.Helper()
	report(t, fixture{Preset: preset, Objects: objects, Allocatable: allocatable, Object: cn})
}

// ReportUnder is Report for an object that does not show all the agent
// holds: the preset's count is to be exactly allocatable - under, and why
// says what it cannot see.
func ReportUnder(t testing.TB, preset, objects string, cn *v2.CiliumNode, allocatable, under int, why string) {
	t.Helper()
	report(t, fixture{Preset: preset, Objects: objects, Allocatable: allocatable, Under: under, UnderWhy: why, Object: cn})
}

func report(t testing.TB, fx fixture) {
	t.Helper()
	preset, objects := fx.Preset, fx.Objects
	b, err := json.MarshalIndent(fx, "", "  ")
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
