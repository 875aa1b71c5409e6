package http1

import (
	"net/http"
	"net/textproto"
	"net/url"
	"strings"

	"github.com/sluicehq/sluice/internal/ascii"
)

// parsePlain parses block, a request line and header block ending in an
// empty line, into a request the way net/http's server would, when it is
// of the plain form (see Server), and reports whether it was. The headers
// go into h, an empty map (nil: a new one), their values into *vals,
// which is grown as needed: every value, the target and the host are
// substrings of one string of block.
func parsePlain(blockBytes []byte, req *http.Request, h http.Header, vals *[]string) bool {
	block := string(blockBytes)
	line, rest, ok := cutCRLFString(block)
	if !ok {
		return false
	}
	sp1 := strings.IndexByte(line, ' ')
	if sp1 < 0 {
		return false
	}
	method := plainMethod(line[:sp1])
	if method == "" {
		return false
	}
	line = line[sp1+1:]
	sp2 := strings.IndexByte(line, ' ')
	if sp2 < 1 || line[sp2+1:] != "HTTP/1.1" {
		return false
	}
	target := line[:sp2]
	if target[0] != '/' {
		return false
	}
	for i := 0; i < len(target); i++ {
		if b := target[i]; b <= ' ' || b >= 0x7f || b == '#' {
			return false
		}
	}
	rawURI := target
	u := parseTarget(target)
	if u == nil {
		return false
	}
	if h == nil {
		h = make(http.Header, 8)
	}
	if n := strings.Count(rest, "\n"); cap(*vals) < n { // the lines, at most
		*vals = make([]string, n)
	}
	vs := (*vals)[:cap(*vals)]
	host, haveHost, closing := "", false, false
	for {
		var key, v string
		var end bool
		if key, v, rest, end, ok = plainField(rest); !ok {
			return false
		}
		if end {
			break
		}
		switch key {
		case "Host":
			if haveHost || !plainHost(v) {
				return false
			}
			host, haveHost = v, true
			continue // net/http's server keeps Host in req.Host only
		case "Content-Length":
			if v != "0" || h[key] != nil {
				return false
			}
		case "Transfer-Encoding", "Expect", "Upgrade", "Trailer", "Pragma", "Http2-Settings":
			return false
		case "Connection":
			if h[key] != nil {
				return false
			}
			if closing, ok = plainConnection(v); !ok {
				return false
			}
		}
		vs = addValue(h, key, v, vs)
	}
	if !haveHost {
		return false
	}
	*req = http.Request{
		Method:     method,
		URL:        u,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     h,
		Body:       http.NoBody,
		Host:       host,
		Close:      closing,
		RequestURI: rawURI,
	}
	return true
}

// parseTarget is url.ParseRequestURI for an origin-form target (it
// starts with '/', and holds no control byte); nil where that fails. A
// path of bytes that are never escaped (plainPath) is its own unescaped
// and escaped form, so that the URL is made without the work of
// unescaping and escaping it again.
func parseTarget(target string) *url.URL {
	rest, query, forceQuery := target, "", false
	if i := strings.IndexByte(target, '?'); i >= 0 {
		if i == len(target)-1 {
			rest, forceQuery = target[:i], true
		} else {
			rest, query = target[:i], target[i+1:]
		}
	}
	if !plainPath(rest) {
		u, err := url.ParseRequestURI(target)
		if err != nil {
			return nil
		}
		return u
	}
	return &url.URL{Path: rest, RawQuery: query, ForceQuery: forceQuery}
}

// plainPath reports whether every byte of p is one a path never escapes
// or unescapes: letters, digits and -._~/$&+,:;=@ (no '%').
func plainPath(p string) bool {
	for i := 0; i < len(p); i++ {
		if !pathBytes[p[i]] {
			return false
		}
	}
	return true
}

var pathBytes = func() (t [256]bool) {
	for b := 0; b < 256; b++ {
		t[b] = 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' ||
			strings.IndexByte("-._~/$&+,:;=@", byte(b)) >= 0
	}
	return t
}()

// escapedPath is u.EscapedPath(), without the work of escaping for a path
// that needs none.
func escapedPath(u *url.URL) string {
	if u.RawPath == "" && plainPath(u.Path) {
		return u.Path
	}
	return u.EscapedPath()
}

// plainMethods are the methods plainMethod names.
var plainMethods = [...]string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions}

// plainMethod returns the method's name (a constant: no allocation), or
// "" for any other.
func plainMethod(m string) string {
	for _, c := range plainMethods {
		if m == c {
			return c
		}
	}
	return ""
}

func plainHost(v string) bool {
	if len(v) == 0 {
		return false
	}
	for i := 0; i < len(v); i++ {
		if fieldBytes[v[i]]&hostByte == 0 {
			return false
		}
	}
	return true
}

// isTokenByte reports whether b may be in a header name (RFC 9110 tchar).
func isTokenByte(b byte) bool { return fieldBytes[b]&tokenByte != 0 }

// fieldBytes says of every byte what it may be in a header line of the
// plain form: in a name (a token byte; a letter, upper or lower case), in
// a value (printable ASCII or tab), in a Host.
var fieldBytes = func() (t [256]uint8) {
	for b := 0; b < 256; b++ {
		switch {
		case 'a' <= b && b <= 'z':
			t[b] |= tokenByte | lowerByte
		case 'A' <= b && b <= 'Z':
			t[b] |= tokenByte | upperByte
		case '0' <= b && b <= '9', strings.IndexByte("!#$%&'*+-.^_`|~", byte(b)) >= 0:
			t[b] |= tokenByte
		}
		if (' ' <= b && b < 0x7f) || b == '\t' {
			t[b] |= valueByte
		}
		if 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || strings.IndexByte(".-:[]_", byte(b)) >= 0 {
			t[b] |= hostByte
		}
	}
	return t
}()

const (
	tokenByte = 1 << iota
	lowerByte
	upperByte
	valueByte
	hostByte // may be in a Host of the plain form
)

// plainConnection reads a Connection value of the plain form: close, or
// keep-alive (any case); not ok for any other.
func plainConnection(v string) (closing, ok bool) {
	switch {
	case strings.EqualFold(v, "close"):
		return true, true
	case strings.EqualFold(v, "keep-alive"):
		return false, true
	}
	return false, false
}

// addValue adds v to h[key], a new key's one-value slice cut from vals
// (room for every line of the block, so that a block costs one slice of
// values), and returns what is left of vals.
func addValue(h http.Header, key, v string, vals []string) []string {
	if vv := h[key]; vv != nil {
		h[key] = append(vv, v)
		return vals
	}
	vals[0] = v
	h[key] = vals[:1:1]
	return vals[1:]
}

// plainField reads the header line at the start of block, of the plain
// form both the server loop and the Client take: a name of token bytes,
// a value of printable bytes or tabs. It returns the name canonical (the
// name itself when it is), the value without its surrounding blanks and
// what follows the line; end at the blank line that ends the block; not ok
// for a line of any other form, or none whole.
func plainField(block string) (key, value, rest string, end, ok bool) {
	i := strings.IndexByte(block, '\n')
	if i < 1 || block[i-1] != '\r' {
		return "", "", "", false, false
	}
	hl, rest := block[:i-1], block[i+1:]
	if hl == "" {
		return "", "", rest, true, true
	}
	// The name: token bytes up to the colon. It is canonical when no
	// letter is lower case at its start or after a '-', nor upper case
	// elsewhere (what CanonicalMIMEHeaderKey checks before it copies).
	colon := 0
	var wrongCase uint8
	caseMask := uint8(lowerByte)
	for ; colon < len(hl); colon++ {
		c := hl[colon]
		if c == ':' {
			break
		}
		t := fieldBytes[c]
		if t&tokenByte == 0 {
			return "", "", "", false, false
		}
		wrongCase |= t & caseMask
		caseMask = upperByte
		if c == '-' {
			caseMask = lowerByte
		}
	}
	if colon == 0 || colon == len(hl) {
		return "", "", "", false, false
	}
	name, v := hl[:colon], hl[colon+1:]
	if !ascii.Printable(v) { // a tab, or a byte not allowed
		for j := 0; j < len(v); j++ {
			if fieldBytes[v[j]]&valueByte == 0 {
				return "", "", "", false, false
			}
		}
	}
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	if wrongCase != 0 {
		name = textproto.CanonicalMIMEHeaderKey(name)
	}
	return name, v, rest, false, true
}

// cutCRLFString cuts s after its first line, which must end in CRLF and
// hold no other CR.
func cutCRLFString(s string) (line, rest string, ok bool) {
	i := strings.IndexByte(s, '\n')
	if i < 1 || s[i-1] != '\r' {
		return "", "", false
	}
	line = s[:i-1]
	if strings.IndexByte(line, '\r') >= 0 {
		return "", "", false
	}
	return line, s[i+1:], true
}
