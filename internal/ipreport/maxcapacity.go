package ipreport

import (
	"strconv"
	"strings"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// MaxCapacity reads what a node's IPAM pool may grow to from the capacity
// source's mirror (capscale.io/underlay-ip-source-max-capacity): the
// count when known, or why the value is not one (the source's expression
// failed, or the annotation is not a count), or neither when the node has
// none. Information only: no mode schedules on it.
func MaxCapacity(annotations map[string]string) (n *int64, invalid string) {
	s, ok := annotations[names.UnderlayIPSourceMaxCapacityAnnotation]
	if !ok {
		return nil, ""
	}
	if why, bad := strings.CutPrefix(s, underlay.InvalidPrefix); bad {
		return nil, why
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 || v > underlay.MaxCapacity {
		return nil, "not a count: " + strconv.Quote(s)
	}
	return &v, ""
}
