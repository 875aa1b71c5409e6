// Package rulekey reads what a rule's buckets are keyed by: its `by`, one
// part or several joined by "+" (package rules documents the forms). Rules
// validate `by` with it and compile each rule's key parts; the limiter
// builds bucket ids from the parts. It is sluice's own, not part of the
// rules API.
package rulekey

import (
	"errors"
	"fmt"
	"net/textproto"
	"strings"

	"github.com/sluicehq/sluice/internal/quote"
)

// MaxParts is the most parts a `by` may join with "+".
const MaxParts = 4

// MaxName bounds a header name or entry key, in bytes: in `by`, in
// match.headers and in match.entries.
const MaxName = 128

// Kind is the kind of one part of a rule's key.
type Kind uint8

const (
	Client Kind = iota // the user, else the API key, else the IP
	User
	APIKey
	IP
	Global
	Endpoint
	Header // Name is the canonical header name
	Entry  // Name is the descriptor entry key
)

// Part is one part of a rule's key, as Parse reads it.
type Part struct {
	Kind Kind
	Name string // header name (canonical form) or entry key
}

// Caller reports whether the part is an identity of the caller.
func (p Part) Caller() bool { return p.Kind <= IP }

const byForm = `must be one of client, user, api_key, ip, global, endpoint, header:<name>, entry:<key>, or several joined by "+" such as api_key+endpoint`

// Parse reads a rule's `by` (see rules.ByGlobal). "" is client. The error
// says what is wrong with it; package rules reports it for the field "by".
func Parse(s string) ([]Part, error) {
	if s == "" {
		return []Part{{Kind: Client}}, nil
	}
	if strings.Count(s, "+") >= MaxParts {
		return nil, fmt.Errorf("at most %d parts joined by \"+\", got %s", MaxParts, quote.Short(s))
	}
	var parts []Part
	for _, f := range strings.Split(s, "+") {
		p, msg := parsePart(f)
		if msg != "" {
			return nil, errors.New(msg)
		}
		for _, q := range parts {
			if q == p || q.Caller() && p.Caller() && (q.Kind == Client || p.Kind == Client) {
				return nil, fmt.Errorf("%s names %s twice", quote.Short(s), quote.Short(f))
			}
		}
		parts = append(parts, p)
	}
	if len(parts) > 1 {
		for _, p := range parts {
			if p.Kind == Global {
				return nil, fmt.Errorf("global is one bucket for every call and joins nothing; use %s without global", quote.Short(strings.ReplaceAll(strings.ReplaceAll(s, "global+", ""), "+global", "")))
			}
		}
	}
	return parts, nil
}

func parsePart(f string) (Part, string) {
	switch f {
	case "", "client":
		if f == "" {
			return Part{}, "empty part; " + byForm
		}
		return Part{Kind: Client}, ""
	case "user":
		return Part{Kind: User}, ""
	case "api_key":
		return Part{Kind: APIKey}, ""
	case "ip":
		return Part{Kind: IP}, ""
	case "global":
		return Part{Kind: Global}, ""
	case "endpoint":
		return Part{Kind: Endpoint}, ""
	}
	kind, name, ok := strings.Cut(f, ":")
	switch {
	case !ok || kind != "header" && kind != "entry":
		return Part{}, fmt.Sprintf("%s, got %s", byForm, quote.Short(f))
	case name == "":
		return Part{}, fmt.Sprintf("%s needs a name after the colon, e.g. %s", quote.Short(f), quote.Short(kind+":"+map[string]string{"header": "x-tenant", "entry": "generic_key"}[kind]))
	case len(name) > MaxName:
		return Part{}, fmt.Sprintf("%s: the name is %d bytes, want at most %d", quote.Short(f), len(name), MaxName)
	}
	if kind == "header" {
		for i := 0; i < len(name); i++ {
			if !TokenChar(name[i]) {
				return Part{}, fmt.Sprintf("%s: a header name is letters, digits and !#$%%&'*.^_`|~- , got %q", quote.Short(f), name[i])
			}
		}
		return Part{Kind: Header, Name: textproto.CanonicalMIMEHeaderKey(name)}, ""
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c >= 0x7f {
			return Part{}, fmt.Sprintf("%s: an entry key is printable ASCII without spaces, got %q", quote.Short(f), c)
		}
	}
	return Part{Kind: Entry, Name: name}, ""
}

// TokenChar reports whether c may appear in an HTTP header name (RFC 9110
// token), "+" excepted: it joins the parts of a key.
func TokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*-.^_`|~", c) >= 0
}
