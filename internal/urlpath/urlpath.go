// Package urlpath cleans request paths as every rule sees them
// (Clean), eight bytes at a time where it can, and folds them to
// lower case for rules that match paths without regard to case. The
// limiter builds bucket keys with the same functions.
package urlpath

import (
	"github.com/sluicehq/sluice/internal/ascii"
)

// Clean returns the form of a request path that rules match, the same
// for every entry point (the decision API, the Envoy API, the gateway and
// the middleware) and for the paths of endpoint patterns:
//
//   - the query and fragment are dropped (from the first "?" or "#");
//   - each segment loses its parameters, from a ";" to the end of the
//     segment ("/api/orders;jsessionid=1" is "/api/orders", "/a/..;/b" is
//     "/b"), as Tomcat and Spring route;
//   - percent escapes ("%6f", "%2F", "%2e") are decoded, once; a decoded
//     "/" separates segments; an escape that is not "%" and two hex
//     digits stays as it is;
//   - empty segments and "." are dropped and ".." removes the segment
//     before it (never above the root), so "//api/orders", "/api/orders/",
//     "/api//orders", "/api/./orders" and "/api/x/../orders" are all
//     "/api/orders";
//   - the result starts with "/" and has no trailing "/" ("/" alone for
//     the root).
//
// "" stays "" (a call without a path). Letter case is kept: a rule asks
// for case-insensitive matching with match.path_case. Clean returns p
// itself, without allocating, when p is already clean.
func Clean(p string) string {
	if p == "" || IsClean(p) {
		return p
	}
	return string(AppendClean(nil, p))
}

// IsClean reports whether Clean(p) == p.
func IsClean(p string) bool {
	if p == "" {
		return true
	}
	if p[0] != '/' {
		return false
	}
	if len(p) == 1 {
		return true
	}
	if p[len(p)-1] == '/' {
		return false
	}
	return wordsClean(p) || bytesClean(p)
}

// bytesClean is IsClean for p, which starts with "/", is longer than
// that and does not end with "/".
func bytesClean(p string) bool {
	// One table lookup per byte; the work is at a "/" and at bytes that
	// are never clean.
	seg := 1 // start of the current segment
	for i := 1; i < len(p); i++ {
		switch pathByte[p[i]] {
		case 0:
			continue
		case 1: // '/'
			if !cleanSegment(p, seg, i) {
				return false
			}
			seg = i + 1
		default: // '?', '#', '%', ';'
			return false
		}
	}
	return cleanSegment(p, seg, len(p))
}

// wordsClean reports, eight bytes at a time, that p — which starts with
// "/" and does not end with one — is clean because it holds none of
// "?#%;." and no "//": with no ".", no segment is "." or "..", and with no
// "//", none is empty. false says nothing: IsClean then looks byte by
// byte. A path shorter than four bytes is left to it.
func wordsClean(p string) bool {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	// zero has bit 7 set in some byte when some byte of x is zero (exact
	// for the word as a whole, not byte by byte).
	zero := func(x uint64) uint64 { return (x - lo) &^ x }
	prev := uint64(0) // bit 63: the byte before x is "/"
	for i := 0; i < len(p); i += 8 {
		var x uint64
		if len(p)-i >= 8 {
			x = ascii.Load64(p[i : i+8])
		} else if i >= 8 {
			// The last bytes: the word that ends the path, less the bytes
			// already read; the zero bytes above them match nothing.
			x = ascii.Load64(p[len(p)-8:]) >> (8 * (8 - (len(p) - i)))
		} else if len(p) >= 4 {
			// Four to seven bytes: the first four, then the last four less
			// those already read, as above.
			x = ascii.Load32(p) | ascii.Load32(p[len(p)-4:])>>(8*(8-len(p)))<<32
		} else {
			return false
		}
		if (zero(x^'?'*lo)|zero(x^'#'*lo)|zero(x^'%'*lo)|zero(x^';'*lo)|zero(x^'.'*lo))&hi != 0 {
			return false
		}
		// Bit 7 of each byte that is "/", exactly.
		v := x ^ '/'*lo
		m := ^((v&^hi + ^uint64(hi)) | v | ^uint64(hi))
		if m&(m<<8|prev>>56) != 0 {
			return false
		}
		prev = m
	}
	return true
}

// pathByte marks the bytes IsClean looks at: 1 for "/", 2 for those a
// clean path never holds.
var pathByte = [256]uint8{'/': 1, '?': 2, '#': 2, '%': 2, ';': 2}

// cleanSegment reports whether p[i:j] is a segment of a clean path: not
// empty, ".", or "..".
func cleanSegment(p string, i, j int) bool {
	switch j - i {
	case 0:
		return false
	case 1:
		return p[i] != '.'
	case 2:
		return p[i] != '.' || p[i+1] != '.'
	}
	return true
}

// AppendClean appends Clean(p) to dst.
func AppendClean(dst []byte, p string) []byte {
	if p == "" {
		return dst
	}
	for i := 0; i < len(p); i++ { // not strings.IndexAny, a call per byte on a short path
		if p[i] == '?' || p[i] == '#' {
			p = p[:i]
			break
		}
	}
	base := len(dst)
	seg := len(dst) // where the current segment's "/" is
	dst = append(dst, '/')
	params := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '/':
			dst = endSegment(dst, base, seg)
			seg, params = len(dst), false
			dst = append(dst, '/')
			continue
		case params:
			continue
		case c == ';':
			params = true
			continue
		case c == '%' && i+2 < len(p) && isHex(p[i+1]) && isHex(p[i+2]):
			c = unhex(p[i+1])<<4 | unhex(p[i+2])
			i += 2
			if c == '/' {
				dst = endSegment(dst, base, seg)
				seg = len(dst)
				dst = append(dst, '/')
				continue
			}
		}
		dst = append(dst, c)
	}
	dst = endSegment(dst, base, seg)
	if len(dst) == base {
		dst = append(dst, '/')
	}
	return dst
}

// endSegment ends the segment whose "/" is at dst[seg]: an empty one or
// "." is removed, ".." is removed with the segment before it.
func endSegment(dst []byte, base, seg int) []byte {
	switch string(dst[seg+1:]) {
	case "", ".":
		return dst[:seg]
	case "..":
		dst = dst[:seg]
		for i := len(dst) - 1; i >= base; i-- {
			if dst[i] == '/' {
				return dst[:i]
			}
		}
		return dst[:base]
	}
	return dst
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// AppendLower appends s to dst with ASCII letters in lower case.
func AppendLower(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}
