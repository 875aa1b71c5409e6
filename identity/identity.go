// Package identity names the callers sluice limits. A call may carry a user
// (from a verified token), an API key and the IP it came from; each rule says
// which of them its bucket is keyed by. A client id is the kind and the value:
// "user:alice", "api_key:k_live_42", "ip:203.0.113.7", "ip:2001:db8:1:2::/64".
//
// This package is the one place client ids are built: the limiter keys
// buckets with it, and every entry point (the decision API, the Envoy API,
// the gateway and the middleware) hands the limiter the values as it got
// them, so one caller is one bucket whichever way it arrives.
//
// # Values kept as a digest
//
// A user or API key is kept as itself when it is 1 to 256 bytes of UTF-8
// without control characters (C0, DEL, C1) and does not start with "h:".
// Any other value — longer, not UTF-8, with a control character, or
// starting with "h:" — is keyed by its digest: "h:" and the first 16 bytes
// of its SHA-256 in lowercase hex, e.g. "user:h:2c26b46b68ffc68ff99b453c1d304134".
// An IP that is not an address is keyed the same way ("ip:h:<hex>"). Such a
// value is still one bucket per distinct value, never an error and never a
// bucket shared with a plain value: no plain value starts with "h:".
package identity

import (
	"errors"
	"net/netip"

	"github.com/sluicehq/sluice/internal/clientkey"
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
	prefixUser   = "user:"
	prefixAPIKey = "api_key:"
	prefixIP     = "ip:"
)

// DefaultIPv6Prefix is the prefix length IPv6 callers are keyed by: one host
// commonly holds a whole /64.
const DefaultIPv6Prefix = 64

// MaxValue is the longest user or API key, in bytes, kept as itself in a
// client id; a longer one is keyed by its digest.
const MaxValue = clientkey.MaxValue

// MaxID is the longest client id AppendUser, AppendAPIKey and AppendIP
// build.
const MaxID = len(prefixAPIKey) + MaxValue

// AppendUser appends the client id of user ("user:alice", or
// "user:h:<hex>" for a value not kept as itself) to dst; nothing for "".
// It does not allocate when dst has room for MaxID bytes.
func AppendUser(dst []byte, user string) []byte { return appendValue(dst, prefixUser, user) }

// AppendAPIKey appends the client id of key ("api_key:k_live_42", or
// "api_key:h:<hex>") to dst; nothing for "".
func AppendAPIKey(dst []byte, key string) []byte { return appendValue(dst, prefixAPIKey, key) }

func appendValue(dst []byte, prefix, v string) []byte {
	if v == "" {
		return dst
	}
	dst = append(dst, prefix...)
	if clientkey.Plain(v) {
		return append(dst, v...)
	}
	return clientkey.AppendDigest(dst, v)
}

// AppendIP appends the client id of the address ip, as a check request or
// a header gives it (see ParseIP), to dst: "ip:" and its key (appendIPKey),
// or "ip:h:<hex>" when it is not an address; nothing for "".
func AppendIP(dst []byte, ip string, bits int) []byte {
	if ip == "" {
		return dst
	}
	dst = append(dst, prefixIP...)
	if _, ok := parseIPv4(ip); ok {
		// Its key is itself: netip spells an IPv4 address one way, the
		// only way parseIPv4 takes.
		return append(dst, ip...)
	}
	if a, err := ParseIP(ip); err == nil {
		return appendIPKey(dst, a, bits)
	}
	return clientkey.AppendDigest(dst, ip)
}

// appendIPKey appends the bucket key of ip (without the "ip:" prefix) to dst:
// an IPv4 address (also an IPv4-mapped IPv6 one) as itself, an IPv6 address
// as its /bits prefix, e.g. "2001:db8:1:2::/64". bits outside 1..128 means
// DefaultIPv6Prefix. It does not allocate when dst has room.
func appendIPKey(dst []byte, ip netip.Addr, bits int) []byte {
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

var errNotIP = errors.New("identity: not an IP address")

// ParseIP parses a caller address as given in a check request or a header:
// IPv4, IPv6 (brackets and zone allowed), IPv4-mapped IPv6, each also with
// a port ("203.0.113.7:443", "[2001:db8::1]:443"), which is dropped. It
// does not allocate for an address without brackets or port.
func ParseIP(s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, errNotIP
	}
	if a, ok := parseIPv4(s); ok {
		return a, nil
	}
	return parseIPAny(s)
}

// parseIPAny is ParseIP through net/netip alone, for what parseIPv4 does
// not take.
func parseIPAny(s string) (netip.Addr, error) {
	if s[0] != '[' {
		if a, err := netip.ParseAddr(s); err == nil {
			return a, nil
		}
	} else if s[len(s)-1] == ']' {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a, nil
		}
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr(), nil
	}
	return netip.Addr{}, errNotIP
}

// parseIPv4 parses s when it is an IPv4 address in dotted decimal
// ("203.0.113.7"): what netip.ParseAddr takes as IPv4, and the same
// address, at a fraction of the cost. ok is false for anything else.
func parseIPv4(s string) (a netip.Addr, ok bool) {
	var b [4]byte
	i := 0
	for n := range 4 {
		if n > 0 {
			if i == len(s) || s[i] != '.' {
				return netip.Addr{}, false
			}
			i++
		}
		// An octet: one to three digits, no leading zero, at most 255.
		if i == len(s) || s[i]-'0' > 9 {
			return netip.Addr{}, false
		}
		v := uint(s[i] - '0')
		i++
		if v != 0 {
			for k := 0; k < 2 && i < len(s) && s[i]-'0' <= 9; k++ {
				v = v*10 + uint(s[i]-'0')
				i++
			}
			if v > 255 {
				return netip.Addr{}, false
			}
		}
		b[n] = byte(v)
	}
	if i != len(s) {
		return netip.Addr{}, false
	}
	return netip.AddrFrom4(b), true
}

// ClientID returns the id of the identity's bucket for kind "user",
// "api_key" or "ip" ("" when that part is empty). "client" means the first
// of user, api_key, ip that is present. IPv6 addresses are keyed by their
// /ipv6Prefix. It is the id the limiter keys the bucket by.
func (id Identity) ClientID(kind string, ipv6Prefix int) string {
	var buf [MaxID]byte
	return string(id.AppendClientID(buf[:0], kind, ipv6Prefix))
}

// AppendClientID appends ClientID(kind, ipv6Prefix) to dst.
func (id Identity) AppendClientID(dst []byte, kind string, ipv6Prefix int) []byte {
	switch kind {
	case "user":
		return AppendUser(dst, id.User)
	case "api_key":
		return AppendAPIKey(dst, id.APIKey)
	case "ip":
		return AppendIP(dst, id.IP, ipv6Prefix)
	case "client", "":
		switch {
		case id.User != "":
			return AppendUser(dst, id.User)
		case id.APIKey != "":
			return AppendAPIKey(dst, id.APIKey)
		}
		return AppendIP(dst, id.IP, ipv6Prefix)
	}
	return dst
}
