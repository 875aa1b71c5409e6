package rules

import (
	"cmp"
	"fmt"
	"math/bits"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/quote"
	"github.com/sluicehq/sluice/internal/rulekey"
)

// Limits on match.headers.
const (
	maxHeaders     = 8   // headers in one rule's match
	maxHeaderValue = 256 // bytes of a value in a rule's match
)

const headerValueForm = `the exact value, a prefix ending in "*" such as "prod-*", or "*" for any value`

// validHeaders checks a rule's match.headers: each name an HTTP header name
// (RFC 9110 token, at most 128 bytes), no name twice in any letter case;
// each value non-empty, at most maxHeaderValue bytes of UTF-8 without
// control characters, one of
//
//	acme      the exact value (letter case counts)
//	prod-*    every value starting with "prod-"
//	*         any value
//
// "*" anywhere but last is refused: the value would read as a pattern it
// is not.
func validHeaders(h map[string]string) *FieldError {
	if len(h) > maxHeaders {
		return fieldErr(fmt.Sprintf("at most %d headers, got %d; make two rules", maxHeaders, len(h)), "match", "headers")
	}
	seen := make(map[string]string, len(h)) // canonical name → name as written
	for _, name := range sortedKeys(h) {
		v := h[name]
		bad := func(format string, args ...any) *FieldError {
			return &FieldError{Field: "match.headers[" + quote.Short(name) + "]", Message: fmt.Sprintf(format, args...), path: []string{"match", "headers", name}}
		}
		switch {
		case name == "":
			return bad(`want a header name such as "X-Tenant"`)
		case len(name) > rulekey.MaxName:
			return bad("the name is %d bytes, want at most %d", len(name), rulekey.MaxName)
		}
		for i := 0; i < len(name); i++ {
			if c := name[i]; !rulekey.TokenChar(c) && c != '+' {
				return bad("a header name is letters, digits and !#$%%&'*+.^_`|~- , got %q", c)
			}
		}
		canon := textproto.CanonicalMIMEHeaderKey(name)
		if prev, dup := seen[canon]; dup {
			return bad("the same header as %s: header names compare without regard to case; keep one", quote.Short(prev))
		}
		seen[canon] = name
		switch {
		case v == "":
			return bad("want a value: %s", headerValueForm)
		case len(v) > maxHeaderValue:
			return bad("the value is %d bytes, want at most %d", len(v), maxHeaderValue)
		case !utf8.ValidString(v) || strings.ContainsFunc(v, unicode.IsControl):
			return bad("the value must be UTF-8 without control characters")
		case strings.Contains(strings.TrimSuffix(v, "*"), "*"):
			return bad(`"*" is only allowed last (every value starting with what comes before it), got %s; want %s`, quote.Short(v), headerValueForm)
		}
	}
	return nil
}

// headerCond is one header of a rule's match, compiled: the call's header
// Name (canonical) must have Value, or start with it when Prefix.
type headerCond struct {
	name   string
	value  string
	prefix bool
}

// fits reports whether a call with headers h fits the condition: the first
// value of the header, as http.Header.Get reads it, is non-empty and equal
// to the value or starts with the prefix.
func (hc *headerCond) fits(h http.Header) bool {
	vs := h[hc.name]
	if len(vs) == 0 || vs[0] == "" {
		return false
	}
	if hc.prefix {
		return strings.HasPrefix(vs[0], hc.value)
	}
	return vs[0] == hc.value
}

// compileHeaders returns a rule's match.headers (valid) as conditions, the
// one the rule is indexed by first: the first exact value in name order,
// else the longest prefix.
func compileHeaders(h map[string]string) []headerCond {
	cs := make([]headerCond, 0, len(h))
	for _, name := range sortedKeys(h) {
		v := h[name]
		hc := headerCond{name: textproto.CanonicalMIMEHeaderKey(name), value: v}
		if strings.HasSuffix(v, "*") {
			hc.value, hc.prefix = v[:len(v)-1], true
		}
		cs = append(cs, hc)
	}
	slices.SortStableFunc(cs, func(a, b headerCond) int {
		if a.prefix != b.prefix {
			if a.prefix {
				return 1
			}
			return -1
		}
		if a.prefix {
			return cmp.Compare(len(b.value), len(a.value))
		}
		return 0
	})
	return cs
}

// headerIndex holds the rules indexed by one header name: by the exact
// value or the prefix of their condition on it, each a matcher of its own
// (by plan, method and path, as the Index's).
type headerIndex struct {
	name   string // canonical
	exact  map[string]*matcher
	prefix map[string]*matcher
	lens   [maxHeaderValue/64 + 1]uint64 // the lengths of prefixes
	// tails has bit tailBit(n, b) set for each prefix of length n ≥ 1
	// ending in byte b: a value whose first n bytes end in a byte whose
	// bit is clear is not looked up under that length.
	tails [8]uint64
}

// tailBit is the bit of tails for a prefix of length n ending in b.
func tailBit(n int, b byte) uint { return (uint(b) + uint(n)*131) % 512 }

// matcherFor returns the matcher of hc's value, made if need be.
func (hi *headerIndex) matcherFor(hc *headerCond) *matcher {
	m := &hi.exact
	if hc.prefix {
		m = &hi.prefix
		n := len(hc.value)
		hi.lens[n/64] |= 1 << (n % 64)
		if n > 0 {
			t := tailBit(n, hc.value[n-1])
			hi.tails[t/64] |= 1 << (t % 64)
		}
	}
	return child(m, hc.value)
}

// match appends the rules indexed under value v (the call's, non-empty)
// that fit c.
func (hi *headerIndex) match(dst []*Compiled, c *call, v string) []*Compiled {
	if m := hi.exact[v]; m != nil {
		dst = m.match(dst, c)
	}
	if hi.prefix == nil {
		return dst
	}
	for w, set := range hi.lens {
		for set != 0 {
			n := w*64 + bits.TrailingZeros64(set)
			if n > len(v) {
				return dst
			}
			set &= set - 1
			if n > 0 {
				if t := tailBit(n, v[n-1]); hi.tails[t/64]&(1<<(t%64)) == 0 {
					continue // no prefix of this length ends so
				}
			}
			if m := hi.prefix[v[:n]]; m != nil {
				dst = m.match(dst, c)
			}
		}
	}
	return dst
}

// values returns the values a call may carry to reach the most rules of
// hi, for the overlap count: every exact value and every prefix (a call
// whose value is a prefix P fits every prefix of P, and the exact P).
func (hi *headerIndex) values() []string {
	vs := sortedKeys(hi.exact)
	for _, p := range sortedKeys(hi.prefix) {
		if _, ok := hi.exact[p]; !ok {
			if p == "" {
				p = "x" // any value: "" is no value
			}
			vs = append(vs, p)
		}
	}
	return vs
}

// most returns the most rules of hi one value reaches, whatever the
// method, path and plan (see values).
func (hi *headerIndex) most() int {
	most := 0
	for _, v := range hi.values() {
		n := 0
		if m := hi.exact[v]; m != nil {
			n += m.size()
		}
		for w, set := range hi.lens {
			for ; set != 0; set &= set - 1 {
				if l := w*64 + bits.TrailingZeros64(set); l <= len(v) {
					if m := hi.prefix[v[:l]]; m != nil {
						n += m.size()
					}
				}
			}
		}
		most = max(most, n)
	}
	return most
}

// size returns the number of rules m holds.
func (m *matcher) size() int {
	n := len(m.anyPath)
	for _, l := range m.planAny {
		n += len(l)
	}
	for _, pi := range []*pathIndex{&m.paths, &m.folded} {
		for _, pr := range pi.m {
			n += len(pr.exact) + len(pr.prefix)
			for i := range pr.plans {
				n += len(pr.plans[i].exact) + len(pr.plans[i].prefix)
			}
		}
	}
	return n
}
