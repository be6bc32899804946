package extender

import (
	"fmt"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/capscale/capscale/internal/names"
)

// underlayResource is the extended resource as a ResourceName.
const underlayResource = v1.ResourceName(names.UnderlayIPResource)

// maxCapacity bounds the capacity annotation so that sums over thousands of
// nodes cannot overflow int64. No node hosts a million underlay IPs.
const maxCapacity = 1 << 20

// ParseCapacity parses the value of the capscale.io/underlay-ip-capacity node
// annotation: a non-negative decimal integer no larger than 1048576,
// surrounding spaces allowed.
func ParseCapacity(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("empty value")
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("not an integer: %q", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("negative: %d", v)
	}
	if v > maxCapacity {
		return 0, fmt.Errorf("larger than %d: %d", maxCapacity, v)
	}
	return v, nil
}

// NodeCapacity returns the underlay IP capacity of a node with the given
// annotations. Without the annotation it is def. With an invalid annotation it
// is 0 and reason explains why, so that the node is never used on a guess.
func NodeCapacity(annotations map[string]string, def int64) (capacity int64, reason string) {
	s, ok := annotations[names.UnderlayIPCapacityAnnotation]
	if !ok {
		return def, ""
	}
	c, err := ParseCapacity(s)
	if err != nil {
		return 0, fmt.Sprintf("invalid %s annotation (%v), treating capacity as 0", names.UnderlayIPCapacityAnnotation, err)
	}
	return c, ""
}

// PodNeed returns how many underlay IPs pod needs, computed the way the
// scheduler computes a pod's effective request: the sum over app containers
// and restartable init (sidecar) containers, at least the largest request of
// any other init container (plus the sidecars started before it), plus the pod
// overhead. A container's request falls back to its limit when it has no
// request, as the API server defaults it for extended resources.
func PodNeed(pod *v1.Pod) int64 {
	if pod == nil {
		return 0
	}
	var sum int64
	for i := range pod.Spec.Containers {
		sum += containerNeed(&pod.Spec.Containers[i].Resources)
	}
	var sidecars, initMax int64
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		n := containerNeed(&c.Resources)
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			sidecars += n
			// A sidecar also runs alongside the init containers after it.
			initMax = max(initMax, sidecars)
			continue
		}
		initMax = max(initMax, sidecars+n)
	}
	need := max(sum+sidecars, initMax)
	if q, ok := pod.Spec.Overhead[underlayResource]; ok {
		need += clampQuantity(q.Value())
	}
	return need
}

func containerNeed(r *v1.ResourceRequirements) int64 {
	if q, ok := r.Requests[underlayResource]; ok {
		return clampQuantity(q.Value())
	}
	if q, ok := r.Limits[underlayResource]; ok {
		return clampQuantity(q.Value())
	}
	return 0
}

// clampQuantity keeps a hostile or broken quantity from overflowing sums.
func clampQuantity(v int64) int64 {
	if v < 0 {
		return 0
	}
	return min(v, maxCapacity)
}

// IsTerminal reports whether pod has finished and so holds no IPs.
func IsTerminal(pod *v1.Pod) bool {
	return pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed
}
