package rules

import (
	"fmt"
	"net/textproto"
	"strings"

	"github.com/sluicehq/sluice/internal/quote"
)

// A rule's `by` names what its buckets are keyed by: one part, or several
// joined by "+" for one bucket per combination of their values.
//
//	client | user | api_key | ip   the caller (as identity keys it)
//	global                         one bucket for every call the rule matches
//	endpoint                       one bucket per method and clean path called
//	header:<name>                  one per value of a request header (gateway, middleware)
//	entry:<key>                    one per value of an Envoy descriptor entry
//	api_key+endpoint               one per API key and endpoint
//
// A call that lacks a value its rule is keyed by (no API key, no such
// header or entry) is not counted by that rule.
const (
	ByGlobal   By = "global"
	ByEndpoint By = "endpoint"
)

// MaxKeyParts is the most parts a `by` may join with "+".
const MaxKeyParts = 4

// maxKeyName bounds a header name or entry key in `by`, in bytes.
const maxKeyName = 128

// KeyKind is the kind of one part of a rule's key.
type KeyKind uint8

const (
	KeyClient KeyKind = iota // the user, else the API key, else the IP
	KeyUser
	KeyAPIKey
	KeyIP
	KeyGlobal
	KeyEndpoint
	KeyHeader // Name is the canonical header name
	KeyEntry  // Name is the descriptor entry key
)

// KeyPart is one part of a rule's key, as ParseBy reads it.
type KeyPart struct {
	Kind KeyKind
	Name string // header name (canonical form) or entry key
}

// Caller reports whether the part is an identity of the caller.
func (p KeyPart) Caller() bool { return p.Kind <= KeyIP }

const byForm = `must be one of client, user, api_key, ip, global, endpoint, header:<name>, entry:<key>, or several joined by "+" such as api_key+endpoint`

// ParseBy reads a rule's `by` (see ByGlobal). "" is client. The error is a
// *FieldError for the field "by".
func ParseBy(b By) ([]KeyPart, error) {
	if b == "" {
		return []KeyPart{{Kind: KeyClient}}, nil
	}
	s := string(b)
	if strings.Count(s, "+") >= MaxKeyParts {
		return nil, fieldErr(fmt.Sprintf("at most %d parts joined by \"+\", got %s", MaxKeyParts, quote.Short(s)), "by")
	}
	var parts []KeyPart
	for _, f := range strings.Split(s, "+") {
		p, msg := parseKeyPart(f)
		if msg != "" {
			return nil, fieldErr(msg, "by")
		}
		for _, q := range parts {
			if q == p || q.Caller() && p.Caller() && (q.Kind == KeyClient || p.Kind == KeyClient) {
				return nil, fieldErr(fmt.Sprintf("%s names %s twice", quote.Short(s), quote.Short(f)), "by")
			}
		}
		parts = append(parts, p)
	}
	if len(parts) > 1 {
		for _, p := range parts {
			if p.Kind == KeyGlobal {
				return nil, fieldErr(fmt.Sprintf("global is one bucket for every call and joins nothing; use %s without global", quote.Short(strings.ReplaceAll(strings.ReplaceAll(s, "global+", ""), "+global", ""))), "by")
			}
		}
	}
	return parts, nil
}

func parseKeyPart(f string) (KeyPart, string) {
	switch f {
	case "", "client":
		if f == "" {
			return KeyPart{}, "empty part; " + byForm
		}
		return KeyPart{Kind: KeyClient}, ""
	case "user":
		return KeyPart{Kind: KeyUser}, ""
	case "api_key":
		return KeyPart{Kind: KeyAPIKey}, ""
	case "ip":
		return KeyPart{Kind: KeyIP}, ""
	case "global":
		return KeyPart{Kind: KeyGlobal}, ""
	case "endpoint":
		return KeyPart{Kind: KeyEndpoint}, ""
	}
	kind, name, ok := strings.Cut(f, ":")
	switch {
	case !ok || kind != "header" && kind != "entry":
		return KeyPart{}, fmt.Sprintf("%s, got %s", byForm, quote.Short(f))
	case name == "":
		return KeyPart{}, fmt.Sprintf("%s needs a name after the colon, e.g. %s", quote.Short(f), quote.Short(kind+":"+map[string]string{"header": "x-tenant", "entry": "generic_key"}[kind]))
	case len(name) > maxKeyName:
		return KeyPart{}, fmt.Sprintf("%s: the name is %d bytes, want at most %d", quote.Short(f), len(name), maxKeyName)
	}
	if kind == "header" {
		for i := 0; i < len(name); i++ {
			if !tokenChar(name[i]) {
				return KeyPart{}, fmt.Sprintf("%s: a header name is letters, digits and !#$%%&'*.^_`|~- , got %q", quote.Short(f), name[i])
			}
		}
		return KeyPart{Kind: KeyHeader, Name: textproto.CanonicalMIMEHeaderKey(name)}, ""
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c >= 0x7f {
			return KeyPart{}, fmt.Sprintf("%s: an entry key is printable ASCII without spaces, got %q", quote.Short(f), c)
		}
	}
	return KeyPart{Kind: KeyEntry, Name: name}, ""
}

// tokenChar reports whether c may appear in an HTTP header name (RFC 9110
// token), "+" excepted: it joins the parts of a key.
func tokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*-.^_`|~", c) >= 0
}
