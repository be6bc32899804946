package plane

import (
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
)

// subnetBase is where real nodes' pod networks come from: a /24 each, the
// first ones that no route or address of the host overlaps, so that a node
// never shadows a network the host uses (or another run's bridge).
var subnetBase = netip.MustParsePrefix("10.233.0.0/16")

// freeSubnets returns n /24s of subnetBase that the host does not use.
func freeSubnets(n int) ([]netip.Prefix, error) {
	used, err := hostPrefixes()
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	a := subnetBase.Addr().As4()
	for k := 0; k < 256 && len(out) < n; k++ {
		a[2] = byte(k)
		cand := netip.PrefixFrom(netip.AddrFrom4(a), 24)
		free := true
		for _, u := range used {
			if u.Overlaps(cand) {
				free = false
				break
			}
		}
		if free {
			out = append(out, cand)
		}
	}
	if len(out) < n {
		return nil, fmt.Errorf("only %d free /24s in %s for %d real nodes", len(out), subnetBase, n)
	}
	return out, nil
}

// hostPrefixes lists the host's IPv4 routes (every table, but the default
// routes) and interface networks.
func hostPrefixes() ([]netip.Prefix, error) {
	out, err := exec.Command("ip", "-4", "-o", "route", "show", "table", "all").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ip route show table all: %w: %s", err, out)
	}
	var ps []netip.Prefix
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		dst := f[0]
		// Typed routes ("local 10.0.0.5 dev eth0", "broadcast ...").
		switch dst {
		case "unicast", "local", "broadcast", "multicast", "blackhole", "unreachable", "prohibit", "throw", "nat", "anycast":
			if len(f) < 2 {
				continue
			}
			dst = f[1]
		}
		if dst == "default" {
			continue
		}
		if !strings.Contains(dst, "/") {
			dst += "/32"
		}
		if p, err := netip.ParsePrefix(dst); err == nil && p.Bits() > 0 {
			ps = append(ps, p.Masked())
		}
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
			ps = append(ps, p.Masked())
		}
	}
	return ps, nil
}
