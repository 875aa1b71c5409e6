package admin

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/listen"
)

// Tokens are the bearer tokens the admin API accepts: the value of
// --admin-token, one token or several separated by commas (spaces around a
// comma are ignored). A token of the form "name:secret" is named: the
// whole string is what a caller sends ("Authorization: Bearer
// alice:s3cret"), and the name before the first colon is the actor its
// changes are recorded under — the X-Sluice-Actor header cannot claim
// another. A token without a colon is unnamed and leaves the actor to that
// header. The zero value accepts no token (no authentication).
type Tokens struct {
	toks listen.Tokens
	err  error // the value is malformed: authentication is on and accepts no one
}

// ParseTokens parses the value of --admin-token. "" is no token (no
// authentication). Anything else must be tokens only: a blank entry (" ",
// ",", "a,,b"), a "name:" without a secret, a ":secret" without a name, an
// invalid name, or a token holding a space or a control character (which
// no Authorization header carries as sent) makes the whole value
// malformed. Malformed Tokens fail closed — Set reports true and Check
// accepts no one — and Err says which entry is wrong: check it at start.
func ParseTokens(s string) Tokens {
	var toks []listen.Token
	if s == "" {
		return Tokens{}
	}
	entries := strings.Split(s, ",")
	for i, e := range entries {
		e = strings.TrimSpace(e)
		at := ""
		if len(entries) > 1 {
			at = fmt.Sprintf("entry %d of %d ", i+1, len(entries))
		}
		tk := listen.Token{Value: e}
		var err error
		name, secret, named := strings.Cut(e, ":")
		switch {
		case e == "" && len(entries) == 1:
			err = errors.New("blank: give a token, or leave it unset for no authentication (loopback only)")
		case e == "":
			err = fmt.Errorf("%sis blank: separate tokens with one comma and no empty entries, e.g. \"alice:Zx81…,ci-bot:Q7c2…\"", at)
		case strings.ContainsFunc(e, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) || !utf8.ValidString(e):
			err = fmt.Errorf("%sholds a space or a control character, which an Authorization header cannot carry as sent; use printable characters only", at)
		case named && secret == "":
			err = fmt.Errorf("%shas no secret after its colon: want \"name:secret\"", at)
		case named && !validName(name):
			err = fmt.Errorf("%shas no valid name before the colon (1 to %d bytes): want \"name:secret\", or a token without a colon", at, maxActor)
		case named:
			tk.Name = name
		}
		if err != nil {
			return Tokens{err: err}
		}
		toks = append(toks, tk)
	}
	return Tokens{toks: listen.TokensOf("--admin-token", toks)}
}

// Err is why the value ParseTokens parsed is malformed, or nil.
func (t Tokens) Err() error { return t.err }

func validName(name string) bool {
	return name != "" && len(name) <= maxActor && utf8.ValidString(name) &&
		!strings.ContainsFunc(name, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) })
}

// Set reports whether authentication is on: a token is configured, or the
// value was malformed (then no one is accepted).
func (t Tokens) Set() bool { return t.toks.Set() || t.err != nil }

// Check returns whether r carries one of the tokens as
// "Authorization: Bearer <token>", and that token's name ("" when
// unnamed). Every token is compared, by hash and in constant time, so that
// neither which token matched nor any token's length leaks.
func (t Tokens) Check(r *http.Request) (name string, ok bool) {
	return t.toks.Match(r.Header.Get("Authorization"))
}
