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
	flag   string // the flag they come from, for messages
	hashes [][sha256.Size]byte
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
		t.hashes = append(t.hashes, sha256.Sum256([]byte(e)))
	}
	return t, nil
}

// Set reports whether any token is configured (authentication is on).
func (t Tokens) Set() bool { return len(t.hashes) > 0 }

// Valid reports whether the value of an Authorization header (or of gRPC's
// authorization metadata) is "Bearer <one of the tokens>". Every token is
// compared, by hash and in constant time, so that neither which token
// matched nor any token's length leaks.
func (t Tokens) Valid(authorization string) bool {
	scheme, tok, found := strings.Cut(authorization, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	tok = strings.TrimSpace(tok)
	// Hashed in place: the bytes of tok are only read.
	h := sha256.Sum256(unsafe.Slice(unsafe.StringData(tok), len(tok)))
	ok := 0
	for i := range t.hashes {
		ok |= subtle.ConstantTimeCompare(h[:], t.hashes[i][:])
	}
	return ok == 1
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
