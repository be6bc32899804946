package capacitysource

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// drawsValues are the values of a source's draws field.
var drawsValues = []string{underlay.DrawsAll, underlay.DrawsMarked}

// validateDraws checks the draws field of an expanded source. A preset
// fills it with its IPAM's answer; a source of your own must state it,
// since either default would be silently wrong for some IPAM: "marked"
// under a pool that serves every pod lets unmarked pods take IPs nobody
// counts, and "all" under a separate underlay pool charges every pod of
// the node to a pool it never touches. The name "none" is the mirror's
// mark for a node no source covers, so no source may take it.
func (s *Source) validateDraws(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch s.Draws {
	case underlay.DrawsAll, underlay.DrawsMarked:
	case "":
		errs = append(errs, field.Required(p.Child("draws"),
			"which pods take an IP from this pool: all (every pod that is not hostNetwork, e.g. the CNI's own pool) or marked (only pods that ask for "+names.UnderlayIPResource+", a separate underlay pool)"))
	default:
		errs = append(errs, field.NotSupported(p.Child("draws"), s.Draws, drawsValues))
	}
	if s.Name == names.UnderlayIPSourceNone {
		errs = append(errs, field.Invalid(p.Child("name"), s.Name, "reserved: the mirror marks a node no source covers with "+names.UnderlayIPSourceAnnotation+": "+names.UnderlayIPSourceNone))
	}
	return errs
}
