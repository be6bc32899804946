package httpserver

import (
	"fmt"
	"net"
	"strconv"
)

// ValidateAddress checks a host:port flag value the way every capscale
// binary accepts it: a port in 0..65535 and a host that is an IP address,
// localhost or empty (all interfaces).
func ValidateAddress(flag, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q: %w", flag, addr, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("%s %q: invalid port %q, must be a number in 0..65535", flag, addr, port)
	}
	if host != "" && net.ParseIP(host) == nil && host != "localhost" {
		return fmt.Errorf("%s %q: host must be an IP address, localhost or empty", flag, addr)
	}
	return nil
}
