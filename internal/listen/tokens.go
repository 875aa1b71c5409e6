package listen

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"
	"unicode"
	"unsafe"

	"github.com/sluicehq/sluice/internal/jsonhttp"
)

// Tokens are the bearer tokens a listener accepts: the value of a flag
// such as --data-token, one token or several separated by commas (several
// let a token be rotated: add the new one, move the clients, drop the old
// one). The zero value accepts anything (no authentication). Safe for
// concurrent use.
type Tokens struct {
	flag string // the flag they come from, for messages
	toks []token
}

// token is one accepted token, kept as its hash.
type token struct {
	hash [sha256.Size]byte
	name string // the actor it stands for ("" for none; see Token)
}

// Token is one token of TokensOf: Value, what a client sends after
// "Bearer ", and Name, the actor it stands for ("" for none).
type Token struct {
	Value, Name string
}

// TokensOf returns Tokens accepting toks, whose values the caller has
// already checked; flag names them in answers ("--admin-token"). It serves
// a token syntax of the caller's own, such as the admin API's named
// tokens.
func TokensOf(flag string, toks []Token) Tokens {
	t := Tokens{flag: flag}
	for _, tk := range toks {
		t.toks = append(t.toks, token{hash: sha256.Sum256([]byte(tk.Value)), name: tk.Name})
	}
	return t
}

// ParseTokens parses a token flag's value s; flag names it in errors
// ("--data-token"). An empty s is no token. A blank entry (" ", "a,,b",
// "a,") and a token with a space or control character in it are refused:
// such a value would otherwise turn authentication off, or hold a token no
// client can send.
func ParseTokens(flag, s string) (Tokens, error) {
	t := Tokens{flag: flag}
	if s == "" {
		return t, nil
	}
	for i, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			return Tokens{}, fmt.Errorf("listen: %s: entry %d is blank; give one or more tokens separated by commas, e.g. %s 'old-token,new-token'", flag, i+1, flag)
		}
		if strings.ContainsFunc(e, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
			return Tokens{}, fmt.Errorf("listen: %s: entry %d holds a space or control character; a bearer token is one word", flag, i+1)
		}
		t.toks = append(t.toks, token{hash: sha256.Sum256([]byte(e))})
	}
	return t, nil
}

// Set reports whether any token is configured (authentication is on).
func (t Tokens) Set() bool { return len(t.toks) > 0 }

// Valid reports whether the value of an Authorization header (or of gRPC's
// authorization metadata) is "Bearer <one of the tokens>" (see Match).
func (t Tokens) Valid(authorization string) bool {
	_, ok := t.Match(authorization)
	return ok
}

// Match reports whether the value of an Authorization header is "Bearer
// <one of the tokens>", and the name of that token. Every token is
// compared, by hash and in constant time, so that neither which token
// matched nor any token's length leaks.
func (t Tokens) Match(authorization string) (name string, ok bool) {
	scheme, tok, found := strings.Cut(authorization, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	// Hashed in place: the bytes of tok are only read.
	h := sha256.Sum256(unsafe.Slice(unsafe.StringData(tok), len(tok)))
	for i := range t.toks {
		if subtle.ConstantTimeCompare(h[:], t.toks[i].hash[:]) == 1 {
			name, ok = t.toks[i].name, true
		}
	}
	return name, ok
}

// HTTP returns h behind the tokens: a request without
// "Authorization: Bearer <token>" is answered 401
// {"error":"unauthorized",...} with WWW-Authenticate: Bearer. Requests
// for the paths in open (exact paths, e.g. "/healthz") pass without a
// token. With no token set, h itself is returned.
func (t Tokens) HTTP(h http.Handler, open ...string) http.Handler {
	if !t.Set() {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !t.Valid(r.Header.Get("Authorization")) && !isOpen(r.URL.Path, open) {
			w.Header().Set("WWW-Authenticate", "Bearer")
			jsonhttp.WriteError(w, http.StatusUnauthorized, "unauthorized",
				`Authorization: want "Bearer <token>" with a token of the server's `+t.flag)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func isOpen(path string, open []string) bool {
	for _, p := range open {
		if path == p {
			return true
		}
	}
	return false
}
