package plane

import (
	"net"
	"strconv"
	"testing"
)

// Ports handed to the plane's processes must lie outside the ephemeral
// range, where no outgoing connection can take them before the process
// binds, and must be free.
func TestFreePortsOutsideEphemeralRange(t *testing.T) {
	lo, hi := ephemeralRange()
	if (lo-lowestPort)+(65535-hi) < 1000 {
		t.Skipf("ephemeral range %d-%d leaves no room outside it", lo, hi)
	}
	check := func(port int) {
		t.Helper()
		if port >= lo && port <= hi {
			t.Fatalf("port %d lies in the ephemeral range %d-%d", port, lo, hi)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("port %d is not free: %v", port, err)
		}
		l.Close()
	}
	for range 50 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		check(port)
	}
	ports, err := freePorts(6)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("freePorts handed out %d twice: %v", p, ports)
		}
		seen[p] = true
		check(p)
	}
}
