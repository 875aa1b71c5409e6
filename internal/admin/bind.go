package admin

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// CheckBind returns an error when the admin API cannot start as
// configured: token (--admin-token) is malformed (see ParseTokens), or the
// API would listen on addr without a token and addr is not a loopback
// address (127.0.0.0/8, ::1 or "localhost"): sluice refuses to start then,
// since anyone who can reach the port could change the rules. An empty
// host (":9090") and the unspecified addresses ("0.0.0.0:9090",
// "[::]:9090") listen on every interface and so are not loopback; other
// host names are not resolved and count as not loopback either.
func CheckBind(addr, token string) error {
	tokens := ParseTokens(token)
	if err := tokens.Err(); err != nil {
		return fmt.Errorf("admin: --admin-token (SLUICE_ADMIN_TOKEN): %w", err)
	}
	if tokens.Set() || isLoopback(addr) {
		return nil
	}
	return fmt.Errorf("admin: refusing to serve the admin API on %q, which is not a loopback address, without a token; "+
		"set --admin-token (SLUICE_ADMIN_TOKEN) or listen on 127.0.0.1", addr)
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]") // no port
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Zone() == "" && ip.IsLoopback()
}
