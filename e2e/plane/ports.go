package plane

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// Ports for the plane's listeners come from outside the kernel's ephemeral
// range (net.ipv4.ip_local_port_range). A port picked inside it (a listen on
// :0) is free only until it is released: before the process meant to serve
// on it starts, any outgoing connection on the machine may take it as its
// local port, and the process fails with "bind: address already in use".
// That happened to the extender, which starts after a 500-node plane has
// opened its connections. Outside the range only explicit binds take ports.

// lowestPort keeps clear of well-known and registered service ports.
const lowestPort = 10000

// FreePort returns a port on 127.0.0.1 that is free now and outside the
// ephemeral range.
func FreePort() (int, error) {
	l, err := listenFree()
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// freePorts returns n distinct free ports, held open together so that none
// is handed out twice.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for i := 0; i < n; i++ {
		l, err := listenFree()
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// listenFree listens on a random port outside the ephemeral range that no
// other process of the suite holds, and holds it (portlock.go). Where the
// range leaves no room (a machine configured to use nearly every port), it
// falls back to the kernel's choice.
func listenFree() (net.Listener, error) {
	lo, hi := ephemeralRange()
	below, above := max(0, lo-lowestPort), max(0, 65535-hi)
	var lastErr error
	for range 64 {
		addr := "127.0.0.1:0"
		if below+above >= 1000 {
			i := rand.IntN(below + above)
			port := lowestPort + i
			if i >= below {
				port = hi + 1 + (i - below)
			}
			addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			lastErr = err
			continue
		}
		ok, err := locks.reserve(l.Addr().(*net.TCPAddr).Port)
		if ok {
			return l, nil
		}
		l.Close()
		if err != nil {
			return nil, err
		}
		lastErr = fmt.Errorf("port %d is held by another process of the suite", l.Addr().(*net.TCPAddr).Port)
	}
	return nil, fmt.Errorf("no free port on 127.0.0.1 outside the ephemeral range %d-%d after 64 tries: %w", lo, hi, lastErr)
}

// ephemeralRange reads the kernel's local port range; Linux's default when
// it cannot.
func ephemeralRange() (lo, hi int) {
	lo, hi = 32768, 60999
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return lo, hi
	}
	l, err1 := strconv.Atoi(f[0])
	h, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || l < 1 || h < l || h > 65535 {
		return lo, hi
	}
	return l, h
}
