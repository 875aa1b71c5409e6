package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Tokens are the bearer tokens the admin API accepts: the value of
// --admin-token, one token or several separated by commas. A token of the
// form "name:secret" is named: the whole string is what a caller sends
// ("Authorization: Bearer alice:s3cret"), and the name before the first
// colon is the actor its changes are recorded under — the X-Sluice-Actor
// header cannot claim another. An unnamed token leaves the actor to that
// header. The zero value accepts no token (no authentication).
type Tokens struct {
	toks []token
}

type token struct {
	hash [sha256.Size]byte
	name string // "" for an unnamed token
}

// ParseTokens parses the value of --admin-token. Blank entries are
// ignored; an entry whose part before the first colon is not a valid
// actor name (printable, at most 128 bytes) is an unnamed token.
func ParseTokens(s string) Tokens {
	var t Tokens
	for e := range strings.SplitSeq(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		tk := token{hash: sha256.Sum256([]byte(e))}
		if name, _, ok := strings.Cut(e, ":"); ok && validName(name) {
			tk.name = name
		}
		t.toks = append(t.toks, tk)
	}
	return t
}

func validName(name string) bool {
	return name != "" && len(name) <= maxActor && utf8.ValidString(name) &&
		!strings.ContainsFunc(name, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) })
}

// Set reports whether any token is configured (authentication is on).
func (t Tokens) Set() bool { return len(t.toks) > 0 }

// Check returns whether r carries one of the tokens as
// "Authorization: Bearer <token>", and that token's name ("" when
// unnamed). Every token is compared, by hash and in constant time, so that
// neither which token matched nor any token's length leaks.
func (t Tokens) Check(r *http.Request) (name string, ok bool) {
	scheme, tok, found := strings.Cut(r.Header.Get("Authorization"), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	h := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	for i := range t.toks {
		if subtle.ConstantTimeCompare(h[:], t.toks[i].hash[:]) == 1 {
			name, ok = t.toks[i].name, true
		}
	}
	return name, ok
}
