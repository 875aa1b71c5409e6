package middleware

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// testNow is the clock of every token test.
var testNow = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

var hsSecret = []byte("test-secret-of-32-bytes-at-least!")

// testKeys are generated once per test binary: RSA generation is slow.
var testKeys = sync.OnceValue(func() (k struct {
	rsa, rsa2 *rsa.PrivateKey
	ec, ec2   *ecdsa.PrivateKey
}) {
	var err error
	if k.rsa, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		panic(err)
	}
	if k.rsa2, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		panic(err)
	}
	if k.ec, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		panic(err)
	}
	if k.ec2, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		panic(err)
	}
	return k
})

// claims returns valid claims for sub with a plan, good for an hour
// around testNow; mod edits them.
func claims(sub, plan string, mod func(jwt.MapClaims)) jwt.MapClaims {
	c := jwt.MapClaims{
		"sub": sub,
		"iat": testNow.Add(-time.Minute).Unix(),
		"nbf": testNow.Add(-time.Minute).Unix(),
		"exp": testNow.Add(time.Hour).Unix(),
	}
	if plan != "" {
		c["plan"] = plan
	}
	if mod != nil {
		mod(c)
	}
	return c
}

// sign signs c with method and key, with kid in the header when not "".
func sign(t testing.TB, method jwt.SigningMethod, key any, kid string, c jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatalf("signing %s: %v", method.Alg(), err)
	}
	return s
}

// newRequest returns GET / from remote.
func newRequest(remote string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remote
	return r
}
