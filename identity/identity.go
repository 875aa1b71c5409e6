// Package identity names the callers sluice limits. A call may carry a user
// (from a verified token), an API key and the IP it came from; each rule says
// which of them its bucket is keyed by. A client id is the kind and the value:
// "user:alice", "api_key:k_live_42", "ip:203.0.113.7", "ip:2001:db8:1:2::/64".
package identity

import (
	"fmt"
	"net/netip"
	"strings"
)

// Identity is who a call comes from. Any field may be empty; IP is the
// caller's address as text. The zero value is an anonymous call with no
// address.
type Identity struct {
	User   string
	APIKey string
	IP     string
}

// Kind prefixes of client ids.
const (
	PrefixUser   = "user:"
	PrefixAPIKey = "api_key:"
	PrefixIP     = "ip:"
)

// DefaultIPv6Prefix is the prefix length IPv6 callers are keyed by: one host
// commonly holds a whole /64.
const DefaultIPv6Prefix = 64

// AppendIPKey appends the bucket key of ip (without the "ip:" prefix) to dst:
// an IPv4 address (also an IPv4-mapped IPv6 one) as itself, an IPv6 address
// as its /bits prefix, e.g. "2001:db8:1:2::/64". bits outside 1..128 means
// DefaultIPv6Prefix. It does not allocate when dst has room.
func AppendIPKey(dst []byte, ip netip.Addr, bits int) []byte {
	ip = ip.Unmap()
	if ip.Is4() {
		return ip.AppendTo(dst)
	}
	if bits <= 0 || bits > 128 {
		bits = DefaultIPv6Prefix
	}
	if bits == 128 {
		return ip.WithZone("").AppendTo(dst)
	}
	p, _ := ip.WithZone("").Prefix(bits) // cannot fail: bits is in range
	return p.AppendTo(dst)
}

// ParseIP parses a caller address as given in a check request or a header:
// IPv4, IPv6 (brackets and zone allowed), IPv4-mapped IPv6.
func ParseIP(s string) (netip.Addr, error) {
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("identity: %q is not an IP address", s)
	}
	return a, nil
}

// ClientID returns the id of the identity's bucket for kind "user",
// "api_key" or "ip" ("" when that part is empty). "client" means the first
// of user, api_key, ip that is present. IPv6 addresses are keyed by their
// /ipv6Prefix.
func (id Identity) ClientID(kind string, ipv6Prefix int) string {
	switch kind {
	case "user":
		if id.User != "" {
			return PrefixUser + id.User
		}
	case "api_key":
		if id.APIKey != "" {
			return PrefixAPIKey + id.APIKey
		}
	case "ip":
		if id.IP != "" {
			a, err := ParseIP(id.IP)
			if err != nil {
				return PrefixIP + id.IP
			}
			return string(AppendIPKey([]byte(PrefixIP), a, ipv6Prefix))
		}
	case "client", "":
		for _, k := range [...]string{"user", "api_key", "ip"} {
			if c := id.ClientID(k, ipv6Prefix); c != "" {
				return c
			}
		}
	}
	return ""
}
