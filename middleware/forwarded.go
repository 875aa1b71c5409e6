package middleware

import (
	"fmt"
	"net/netip"
	"strings"
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
	} else if i := strings.LastIndexByte(s, ':'); i >= 0 && strings.IndexByte(s, ':') == i {
		// Exactly one colon: IPv4 with a port. (Bare IPv6 has two or more.)
		if !isPort(s[i:]) {
			return netip.Addr{}, "", false
		}
		host = s[:i]
	} else {
		host = s
	}
	a, err := netip.ParseAddr(host)
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
// chain is the for= parameter of each element, in order. An element
// without for=, or whose for= is "unknown", an obfuscated name or not an
// address, ends the walk as an invalid entry does.
func clientFromForwarded(values []string, proxies []netip.Prefix, peer netip.Addr, peerHost string) (netip.Addr, string) {
	var buf [16]string // for= values; more spill to the heap
	chain := buf[:0]
	for _, v := range values {
		chain = appendForwardedFor(chain, v)
		if len(chain) > 2*maxHops {
			// Only the right-most maxHops entries can matter.
			chain = append(chain[:0], chain[len(chain)-maxHops:]...)
		}
	}
	last, lastHost := peer, peerHost
	for i, hops := len(chain)-1, 0; i >= 0; i-- {
		if hops++; hops > maxHops {
			break
		}
		a, host, ok := hostOf(chain[i])
		if !ok {
			break
		}
		if !trusted(proxies, a) {
			return a, host
		}
		last, lastHost = a, host
	}
	return last, lastHost
}

// appendForwardedFor appends the for= value of each element of one
// Forwarded header value to dst ("" for an element without one or with a
// malformed one; nothing for an empty element, as in "a, , b"). Quoted values are returned without their quotes; a
// quoted value holding a backslash escape is returned as "" (no address
// needs one).
func appendForwardedFor(dst []string, s string) []string {
	i := 0
	for {
		// One element: pairs separated by ';', ended by ',' or the end.
		forValue, bad, empty := "", false, true
		for {
			for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
				i++
			}
			start := i
			for i < len(s) && s[i] != '=' && s[i] != ';' && s[i] != ',' {
				i++
			}
			name := strings.TrimSpace(s[start:i])
			if name != "" || (i < len(s) && s[i] == '=') {
				empty = false
			}
			var val string
			if i < len(s) && s[i] == '=' {
				i++
				if i < len(s) && s[i] == '"' {
					i++
					vs := i
					for i < len(s) && s[i] != '"' {
						if s[i] == '\\' {
							bad = true
							if i+1 < len(s) {
								i++
							}
						}
						i++
					}
					if i >= len(s) {
						bad = true // unterminated quote
					}
					val = s[vs:min(i, len(s))]
					if i < len(s) {
						i++ // closing quote
					}
				} else {
					vs := i
					for i < len(s) && s[i] != ';' && s[i] != ',' {
						i++
					}
					val = strings.TrimSpace(s[vs:i])
				}
			} else if name != "" {
				bad = true // a parameter without a value
			}
			if strings.EqualFold(name, "for") {
				if forValue != "" {
					bad = true // repeated for=
				}
				forValue = val
			}
			// Skip anything up to the next separator (junk after a quoted value).
			for i < len(s) && s[i] != ';' && s[i] != ',' {
				if s[i] != ' ' && s[i] != '\t' {
					bad = true
				}
				i++
			}
			if i >= len(s) || s[i] == ',' {
				break
			}
			i++ // ';'
		}
		if bad {
			forValue = ""
		}
		if !empty {
			dst = append(dst, forValue)
		}
		if i >= len(s) {
			return dst
		}
		i++ // ','
	}
}
