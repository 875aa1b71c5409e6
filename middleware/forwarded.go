package middleware

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/sluicehq/sluice/identity"
)

// Forwarding headers a trusted proxy may name the client in.
const (
	HeaderXForwardedFor = "X-Forwarded-For" // "client, proxy1, proxy2" (the default)
	HeaderForwarded     = "Forwarded"       // RFC 7239: for=client;proto=https, for=proxy1
)

// maxHops bounds how many entries of a forwarding chain are looked at, so
// that a header stuffed with trusted addresses costs a bounded walk.
const maxHops = 64

// ParseTrustedProxies parses a comma-separated list of CIDRs ("10.0.0.0/8,
// 2001:db8::/32"); a bare address stands for itself alone (/32 or /128).
// Empty entries are skipped; IPv4-mapped IPv6 prefixes are rejected, since
// peers are compared in their unmapped form.
func ParseTrustedProxies(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		var p netip.Prefix
		if strings.Contains(part, "/") {
			var err error
			if p, err = netip.ParsePrefix(part); err != nil {
				return nil, fmt.Errorf("middleware: trusted proxy %q is not a CIDR", part)
			}
		} else {
			a, err := netip.ParseAddr(part)
			if err != nil || a.Zone() != "" {
				return nil, fmt.Errorf("middleware: trusted proxy %q is not a CIDR or an address", part)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Addr().Is4In6() {
			return nil, fmt.Errorf("middleware: trusted proxy %q: write IPv4-mapped prefixes as IPv4", part)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// trusted reports whether a is in one of the prefixes.
func trusted(proxies []netip.Prefix, a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	for _, p := range proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// hostOf splits a RemoteAddr ("203.0.113.7:5123", "[2001:db8::1]:5123") or
// a forwarding hop ("203.0.113.7", "[2001:db8::1]:80", "2001:db8::1") into
// the address and its text without brackets or port. ok is false when s
// holds no address.
func hostOf(s string) (a netip.Addr, host string, ok bool) {
	if s == "" {
		return netip.Addr{}, "", false
	}
	if s[0] == '[' { // [v6] or [v6]:port
		end := strings.IndexByte(s, ']')
		if end < 0 || (end+1 < len(s) && !isPort(s[end+1:])) {
			return netip.Addr{}, "", false
		}
		host = s[1:end]
	} else if i := strings.IndexByte(s, ':'); i >= 0 && strings.IndexByte(s[i+1:], ':') < 0 {
		// Exactly one colon: IPv4 with a port. (Bare IPv6 has two or more.)
		if !isPort(s[i:]) {
			return netip.Addr{}, "", false
		}
		host = s[:i]
	} else {
		host = s
	}
	a, err := identity.ParseIP(host)
	if err != nil {
		return netip.Addr{}, "", false
	}
	return a, host, true
}

// isPort reports whether s is ":" followed by 1 to 5 digits.
func isPort(s string) bool {
	if len(s) < 2 || len(s) > 6 || s[0] != ':' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// clientFromXFF walks the X-Forwarded-For chain of values (every header
// line in order, each a comma-separated list) from the right, starting
// after the peer, which the caller has found trusted. It returns the first
// address that is not a trusted proxy; when it meets an entry that is not
// an address, or runs out of entries (or of maxHops), it returns the last
// address it walked past — the trusted hop that received the call from
// whoever wrote the rest, peer included. peerHost is the peer's text.
func clientFromXFF(values []string, proxies []netip.Prefix, peer netip.Addr, peerHost string) (netip.Addr, string) {
	last, lastHost := peer, peerHost
	hops := 0
	for v := len(values) - 1; v >= 0; v-- {
		s := values[v]
		for end := len(s); end >= 0; {
			start := strings.LastIndexByte(s[:end], ',') + 1
			entry := strings.TrimSpace(s[start:end])
			end = start - 1
			if entry == "" {
				continue // "a,,b" and trailing commas: nothing written there
			}
			if hops++; hops > maxHops {
				return last, lastHost
			}
			a, host, ok := hostOf(entry)
			if !ok {
				return last, lastHost
			}
			if !trusted(proxies, a) {
				return a, host
			}
			last, lastHost = a, host
		}
	}
	return last, lastHost
}

// clientFromForwarded is clientFromXFF for RFC 7239 Forwarded headers: the
// chain is the for= parameter of each element. Elements are read from the
// right, each on its own, split at the commas between them: what a
// trusted proxy appended (", for=<client>") is read whatever the client
// wrote to its left, so a malformed header — an unterminated quote that
// would swallow the rest of the line, junk, a stray quote — is ignored as a
// whole except for the well-formed elements trusted proxies appended to
// it. An element that does not parse (see forwardedFor), has no for=, or
// whose for= is "unknown", an obfuscated name ("_hidden") or not an
// address, ends the walk as an invalid entry does. No for= value that
// names an address holds a comma, so splitting at commas never cuts one.
func clientFromForwarded(values []string, proxies []netip.Prefix, peer netip.Addr, peerHost string) (netip.Addr, string) {
	last, lastHost := peer, peerHost
	hops := 0
	for v := len(values) - 1; v >= 0; v-- {
		s := values[v]
		for end := len(s); end >= 0; {
			start := strings.LastIndexByte(s[:end], ',') + 1
			elem := strings.Trim(s[start:end], " \t")
			end = start - 1
			if elem == "" {
				continue // "a, , b" and trailing commas: nothing written there
			}
			if hops++; hops > maxHops {
				return last, lastHost
			}
			val, ok := forwardedFor(elem)
			if !ok {
				return last, lastHost
			}
			a, host, ok := hostOf(withoutObfuscatedPort(val))
			if !ok {
				return last, lastHost
			}
			if !trusted(proxies, a) {
				return a, host
			}
			last, lastHost = a, host
		}
	}
	return last, lastHost
}

// withoutObfuscatedPort drops an obfuscated port (RFC 7239 obfport, ":_"
// and a name) from a for= value: "192.0.2.43:_p1" is 192.0.2.43,
// "[2001:db8::1]:_p1" is [2001:db8::1].
func withoutObfuscatedPort(v string) string {
	i := strings.LastIndex(v, ":_")
	if i < 0 {
		return v
	}
	if strings.HasPrefix(v, "[") && i > 0 && v[i-1] == ']' || !strings.HasPrefix(v, "[") && strings.IndexByte(v, ':') == i {
		return v[:i]
	}
	return v
}

// forwardedFor returns the for= value of one Forwarded element (the text
// between two commas), without quotes. ok is false when the element does
// not parse: a pair without "=" or with an empty name, a quoted value that
// is not closed, holds a backslash escape (no address needs one) or is
// followed by anything but ";", a '"' inside an unquoted value, for= twice,
// or no for= at all. Unquoted values are read leniently (up to the next
// ";" or whitespace), since proxies write addresses with ports or brackets
// unquoted.
func forwardedFor(elem string) (val string, ok bool) {
	found := false
	for i := 0; i <= len(elem); {
		for i < len(elem) && (elem[i] == ' ' || elem[i] == '\t') {
			i++
		}
		if i == len(elem) {
			break
		}
		if elem[i] == ';' { // an empty pair
			i++
			continue
		}
		start := i
		for i < len(elem) && elem[i] != '=' && elem[i] != ';' && elem[i] != '"' && elem[i] != ' ' && elem[i] != '\t' {
			i++
		}
		name := elem[start:i]
		if name == "" || i == len(elem) || elem[i] != '=' {
			return "", false // no name, or a name without "="
		}
		i++ // '='
		var v string
		if i < len(elem) && elem[i] == '"' {
			end := strings.IndexByte(elem[i+1:], '"')
			if end < 0 {
				return "", false // unterminated quote
			}
			v = elem[i+1 : i+1+end]
			if strings.IndexByte(v, '\\') >= 0 {
				return "", false
			}
			i += end + 2
		} else {
			vs := i
			for i < len(elem) && elem[i] != ';' && elem[i] != ' ' && elem[i] != '\t' {
				if elem[i] == '"' {
					return "", false // a quote inside an unquoted value
				}
				i++
			}
			v = elem[vs:i]
		}
		for i < len(elem) && (elem[i] == ' ' || elem[i] == '\t') {
			i++
		}
		if i < len(elem) {
			if elem[i] != ';' {
				return "", false // junk after the value
			}
			i++
		}
		if strings.EqualFold(name, "for") {
			if found {
				return "", false // for= twice
			}
			val, found = v, true
		}
	}
	return val, found
}
