package limiter

import (
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/clientkey"
	"github.com/sluicehq/sluice/internal/rulekey"
	"github.com/sluicehq/sluice/internal/urlpath"
	"github.com/sluicehq/sluice/rules"
)

// Bucket ids of rules keyed by more than the caller (rulekey.Parse). A
// rule's bucket is the store's (Op.Client, Op.Rule); Op.Client is, for a
// key of one part:
//
//	client, user, api_key, ip   the caller's id, "user:alice" (as always)
//	global                      "global"
//	endpoint                    "endpoint:GET /api/orders" (method and clean path;
//	                            the path in lower case for a path_case
//	                            insensitive rule, which matches it so)
//	header:<name>               "header:x-tenant=acme" (name in lower case)
//	entry:<key>                 "entry:generic_key=foo"
//
// and for a key of several parts, each of those prefixed by its length and
// joined by "|": "017:api_key:k_live_42|024:endpoint:GET /api/orders", so
// that no two combinations of values make one id. A value that is not
// clientkey.Plain (longer than 256 bytes, control characters, …) is keyed
// by its digest ("h:" and 32 hex digits), as a caller's is, so an id never
// outgrows its scratch space.
//
// On Redis the whole id is the hash tag: one shard per bucket id. Every
// global rule's bucket is on the shard of "global".
const (
	keyGlobal   = "global"
	maxKeyValue = 256
	// maxKeyPart bounds one part: kind, name, "=", value or digest, and
	// the length prefix of a combination.
	maxKeyPart = len("endpoint:") + 128 + 1 + maxKeyValue + 4
	maxKey     = rulekey.MaxParts * (maxKeyPart + 1)
)

// keyInput is what a call offers a rule's key: its caller ids as the
// limiter built them, and the request.
type keyInput struct {
	user, apiKey, ip string
	method, path     string // path: the clean path
	header           http.Header
	entries          []rules.Entry
	// endpoint is the endpoint's part of a key, "endpoint:" and what
	// appendEndpoint appends, built in epBuf by the first rule keyed by it
	// and used or copied by the others; "" until then. folded is the same
	// with the path in lower case, built in foldBuf, for path_case
	// insensitive rules: one spelling of their endpoint is one bucket.
	endpoint, folded string
	epBuf, foldBuf   *[maxEndpoint]byte
}

// maxEndpoint bounds the endpoint's part of a key: "endpoint:" and a
// plain value or a digest.
const maxEndpoint = len(keyEndpoint) + maxKeyValue

const keyEndpoint = "endpoint:"

// endpointPart returns the endpoint's part of a key for rule r
// (keyInput.endpoint, or keyInput.folded when r matches paths without
// letter case), built on first use; ok is false for a call without a
// method or path.
func (in *keyInput) endpointPart(r *rules.Compiled) (_ string, ok bool) {
	if in.method == "" || in.path == "" {
		return "", false
	}
	if foldsPath(r) {
		if in.folded == "" {
			b := append(in.foldBuf[:0], keyEndpoint...)
			in.folded = bytesString(appendEndpoint(b, in.method, in.path, true))
		}
		return in.folded, true
	}
	if in.endpoint == "" {
		b := append(in.epBuf[:0], keyEndpoint...)
		in.endpoint = bytesString(appendEndpoint(b, in.method, in.path, false))
	}
	return in.endpoint, true
}

// foldsPath reports whether r matches paths without letter case
// (path_case insensitive), so that its endpoint keys fold them too.
func foldsPath(r *rules.Compiled) bool { return r.Match.PathCase == rules.PathCaseInsensitive }

// appendKey appends the bucket id of rule r for the call to buf and
// returns it (for a key of one caller part, the caller's id, appending
// nothing). ok is false when the call lacks a value the key needs: the
// rule does not count the call.
func appendKey(buf []byte, r *rules.Compiled, in *keyInput) (_ []byte, id string, ok bool) {
	if len(r.Key) == 1 { // the id of a key of one part is often at hand
		switch k := r.Key[0].Kind; {
		case r.Key[0].Caller():
			_, id = pick(k, in.user, in.apiKey, in.ip)
			return buf, id, id != ""
		case k == rulekey.Global:
			return buf, keyGlobal, true
		case k == rulekey.Endpoint:
			id, ok = in.endpointPart(r)
			return buf, id, ok
		}
	}
	start := len(buf)
	multi := len(r.Key) > 1
	for i, p := range r.Key {
		if i > 0 {
			buf = append(buf, '|')
		}
		ps := len(buf)
		if multi {
			buf = append(buf, "000:"...) // the length, written below
		}
		vs := len(buf)
		switch p.Kind {
		case rulekey.Global:
			buf = append(buf, keyGlobal...)
		case rulekey.Endpoint:
			e, ok := in.endpointPart(r)
			if !ok {
				return buf[:start], "", false
			}
			buf = append(buf, e...)
		case rulekey.Header:
			var v string
			if vs := in.header[p.Name]; len(vs) > 0 {
				v = vs[0]
			}
			if v == "" {
				return buf[:start], "", false
			}
			buf = append(buf, "header:"...)
			buf = urlpath.AppendLower(buf, p.Name)
			buf = append(buf, '=')
			buf = appendValue(buf, v)
		case rulekey.Entry:
			v, found := entryValue(in.entries, p.Name)
			if !found {
				return buf[:start], "", false
			}
			buf = append(buf, "entry:"...)
			buf = append(buf, p.Name...)
			buf = append(buf, '=')
			if v != "" { // an empty value is a value, as in envoyproxy/ratelimit: "entry:<key>="
				buf = appendValue(buf, v)
			}
		default:
			_, c := pick(p.Kind, in.user, in.apiKey, in.ip)
			if c == "" {
				return buf[:start], "", false
			}
			buf = append(buf, c...)
		}
		if multi { // "017:", the part's length in three digits (< maxKeyPart)
			n := len(buf) - vs
			buf[ps], buf[ps+1], buf[ps+2] = '0'+byte(n/100), '0'+byte(n/10%10), '0'+byte(n%10)
		}
	}
	return buf, bytesString(buf[start:]), true
}

// appendValue appends v as it is when clientkey.Plain (printable, at most
// clientkey.MaxValue bytes, not itself a digest), else its digest, as the
// caller ids are.
func appendValue(buf []byte, v string) []byte {
	if clientkey.Plain(v) {
		return append(buf, v...)
	}
	return clientkey.AppendDigest(buf, v)
}

// appendEndpoint appends the endpoint a call is counted under: its method
// in upper case (HEAD as GET, which rules match it as), a space and its
// clean path (see Paths in package rules), with ASCII letters in lower case when fold
// (as a path_case insensitive rule compares it), or the digest of that
// when it is not plain.
func appendEndpoint(buf []byte, method, path string, fold bool) []byte {
	var tmp [maxKeyValue + 64]byte
	e := tmp[:0]
	if len(method) == 4 && method[0]|0x20 == 'h' && strings.EqualFold(method, "HEAD") {
		method = "GET"
	}
	for i := 0; i < len(method); i++ {
		c := method[i]
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		e = append(e, c)
	}
	e = append(e, ' ')
	if urlpath.IsClean(path) {
		e = append(e, path...)
	} else {
		e = urlpath.AppendClean(e, path)
	}
	if fold {
		p := e[len(method)+1:]
		for i, c := range p {
			if 'A' <= c && c <= 'Z' {
				p[i] = c + 'a' - 'A'
			}
		}
	}
	return appendValue(buf, bytesString(e))
}

// entryValue returns the value of the first entry with key k; found is
// false when there is none.
func entryValue(es []rules.Entry, k string) (v string, found bool) {
	for _, e := range es {
		if e.Key == k {
			return e.Value, true
		}
	}
	return "", false
}
