package plane

import (
	"context"
	"errors"
	"net/netip"
)

// whereaboutsSlicesRange is the range StartWhereaboutsSlices divides: no
// pod takes an address of it on kwok nodes, so a documentation range
// (TEST-NET-2) that no host routes will do.
var whereaboutsSlicesRange = netip.MustParsePrefix("198.51.100.0/24")

// StartWhereaboutsSlices runs whereabouts' node-slice controller (with its
// CRDs, its identity and a network whose slices hold capacity usable IPs)
// on a plane without real nodes: the controller needs only the API, and
// gives every Node a slice as it joins, the ones a node autoscaler
// launches too. It returns the network's NodeSlicePool, in
// WhereaboutsNamespace, once the controller has made it, and the
// controller's process. A plane with IPAM whereabouts has its own network;
// this is for kwok nodes alone.
func (p *Plane) StartWhereaboutsSlices(ctx context.Context, capacity int) (string, *Process, error) {
	if p.wb != nil || p.Opts.RealNodes > 0 {
		return "", nil, errors.New("StartWhereaboutsSlices is for a plane of kwok nodes alone (real nodes use Options.IPAM)")
	}
	bits, err := whereaboutsSliceBits(capacity)
	if err != nil {
		return "", nil, err
	}
	wb, err := p.setupWhereabouts(ctx, "capscale-slices", whereaboutsSlicesRange, bits)
	if err != nil {
		return "", nil, err
	}
	p.wb = wb
	return wb.Name, wb.controller, nil
}
