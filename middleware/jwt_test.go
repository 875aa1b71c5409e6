package middleware

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func pemOf(t testing.TB, typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func pkix1(t testing.TB, pub any) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pemOf(t, "PUBLIC KEY", der)
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func jwksOf(t testing.TB, keys map[string]any) []byte {
	t.Helper()
	var out []map[string]string
	for kid, k := range keys {
		switch k := k.(type) {
		case *rsa.PublicKey:
			out = append(out, map[string]string{"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
				"n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes())})
		case *ecdsa.PublicKey:
			b, err := k.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, map[string]string{"kty": "EC", "kid": kid, "crv": "P-256",
				"x": b64(b[1:33]), "y": b64(b[33:])})
		}
	}
	// A key for encryption and one of an unsupported type are skipped.
	out = append(out, map[string]string{"kty": "RSA", "kid": "enc", "use": "enc", "n": "AQAB", "e": "AQAB"},
		map[string]string{"kty": "OKP", "kid": "ed", "crv": "Ed25519", "x": "AAAA"})
	b, err := json.Marshal(map[string]any{"keys": out})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestVerify(t *testing.T) {
	k := testKeys()
	now := func() time.Time { return testNow }
	cert := func() []byte {
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "issuer"},
			NotBefore: testNow.Add(-time.Hour), NotAfter: testNow.Add(time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.rsa.PublicKey, k.rsa)
		if err != nil {
			t.Fatal(err)
		}
		return pemOf(t, "CERTIFICATE", der)
	}

	hs := JWTConfig{HS256Secret: hsSecret, Now: now}
	rsPEM := JWTConfig{Keys: mustParse(t, pkix1(t, &k.rsa.PublicKey)), Now: now}
	rsPKCS1 := JWTConfig{Keys: mustParse(t, pemOf(t, "RSA PUBLIC KEY", x509.MarshalPKCS1PublicKey(&k.rsa.PublicKey))), Now: now}
	rsCert := JWTConfig{Keys: mustParse(t, cert()), Now: now}
	esPEM := JWTConfig{Keys: mustParse(t, pkix1(t, &k.ec.PublicKey)), Now: now}
	jwks := JWTConfig{Keys: mustParse(t, jwksOf(t, map[string]any{"r1": &k.rsa.PublicKey, "e1": &k.ec.PublicKey})), Now: now}
	both := JWTConfig{HS256Secret: hsSecret, Keys: mustParse(t, append(pkix1(t, &k.rsa.PublicKey), pkix1(t, &k.ec.PublicKey)...)), Now: now}

	good := claims("alice", "pro", nil)
	with := func(mod func(jwt.MapClaims)) jwt.MapClaims { return claims("alice", "pro", mod) }
	rsaPubPEM := pkix1(t, &k.rsa.PublicKey)

	tests := []struct {
		name     string
		cfg      JWTConfig
		token    string
		wantUser string // "" means refused
		wantPlan string
	}{
		{"HS256", hs, sign(t, jwt.SigningMethodHS256, hsSecret, "", good), "alice", "pro"},
		{"RS256 PKIX PEM", rsPEM, sign(t, jwt.SigningMethodRS256, k.rsa, "", good), "alice", "pro"},
		{"RS256 PKCS1 PEM", rsPKCS1, sign(t, jwt.SigningMethodRS256, k.rsa, "", good), "alice", "pro"},
		{"RS256 certificate", rsCert, sign(t, jwt.SigningMethodRS256, k.rsa, "", good), "alice", "pro"},
		{"ES256 PEM", esPEM, sign(t, jwt.SigningMethodES256, k.ec, "", good), "alice", "pro"},
		{"JWKS RS256 with kid", jwks, sign(t, jwt.SigningMethodRS256, k.rsa, "r1", good), "alice", "pro"},
		{"JWKS ES256 with kid", jwks, sign(t, jwt.SigningMethodES256, k.ec, "e1", good), "alice", "pro"},
		{"JWKS without kid", jwks, sign(t, jwt.SigningMethodES256, k.ec, "", good), "alice", "pro"},
		{"JWKS unknown kid", jwks, sign(t, jwt.SigningMethodRS256, k.rsa, "r9", good), "", ""},
		{"JWKS kid of another key", jwks, sign(t, jwt.SigningMethodRS256, k.rsa, "e1", good), "", ""},
		{"every algorithm configured: ES256", both, sign(t, jwt.SigningMethodES256, k.ec, "", good), "alice", "pro"},
		{"no plan claim", hs, sign(t, jwt.SigningMethodHS256, hsSecret, "", claims("alice", "", nil)), "alice", ""},
		{"invalid plan claim", hs, sign(t, jwt.SigningMethodHS256, hsSecret, "", with(func(c jwt.MapClaims) { c["plan"] = "no spaces" })), "alice", ""},
		{"plan claim not a string", hs, sign(t, jwt.SigningMethodHS256, hsSecret, "", with(func(c jwt.MapClaims) { c["plan"] = 7 })), "alice", ""},
		{"custom plan claim", JWTConfig{HS256Secret: hsSecret, Now: now, PlanClaim: "tier"},
			sign(t, jwt.SigningMethodHS256, hsSecret, "", with(func(c jwt.MapClaims) { c["tier"] = "gold" })), "alice", "gold"},
		{"no exp", hs, sign(t, jwt.SigningMethodHS256, hsSecret, "", with(func(c jwt.MapClaims) { delete(c, "exp") })), "alice", "pro"},
		{"issuer and audience", JWTConfig{HS256Secret: hsSecret, Now: now, Issuer: "idp", Audience: "api"},
			sign(t, jwt.SigningMethodHS256, hsSecret, "", with(func(c jwt.MapClaims) { c["iss"] = "idp"; c["aud"] = []string{"web", "api"} })), "alice", "pro"},

		// Never trusted.
		{"expired", hs, sign(t, jwt.SigningMethodHS256, hsSecret, "", with(func(c jwt.MapClaims) { c["exp"] = testNow.Add(-time.Second).Unix() })), "", ""},
		{"not yet valid", hs, sign(t, jwt.SigningMethodHS256, hsSecret, "", with(func(c jwt.MapClaims) { c["nbf"] = testNow.Add(time.Minute).Unix() })), "", ""},
		{"issued in the future", hs, sign(t, jwt.SigningMethodHS256, hsSecret, "", with(func(c jwt.MapClaims) { c["iat"] = testNow.Add(time.Minute).Unix() })), "", ""},
		{"wrong HS256 secret", hs, sign(t, jwt.SigningMethodHS256, []byte("another-secret-of-32-bytes-long!"), "", good), "", ""},
		{"wrong RSA key", rsPEM, sign(t, jwt.SigningMethodRS256, k.rsa2, "", good), "", ""},
		{"wrong EC key", esPEM, sign(t, jwt.SigningMethodES256, k.ec2, "", good), "", ""},
		{"alg none", hs, sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "", good), "", ""},
		{"alg none, every algorithm configured", both, sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "", good), "", ""},
		{"HS256 signed with the RSA public key (algorithm confusion)", rsPEM, sign(t, jwt.SigningMethodHS256, rsaPubPEM, "", good), "", ""},
		{"HS256 when only RS256 is configured", rsPEM, sign(t, jwt.SigningMethodHS256, hsSecret, "", good), "", ""},
		{"RS256 when only HS256 is configured", hs, sign(t, jwt.SigningMethodRS256, k.rsa, "", good), "", ""},
		{"RS384 with the right key", rsPEM, sign(t, jwt.SigningMethodRS384, k.rsa, "", good), "", ""},
		{"HS512 with the right secret", hs, sign(t, jwt.SigningMethodHS512, hsSecret, "", good), "", ""},
		{"no sub", hs, sign(t, jwt.SigningMethodHS256, hsSecret, "", with(func(c jwt.MapClaims) { delete(c, "sub") })), "", ""},
		{"sub not a string", hs, sign(t, jwt.SigningMethodHS256, hsSecret, "", with(func(c jwt.MapClaims) { c["sub"] = 42 })), "", ""},
		{"sub empty", hs, sign(t, jwt.SigningMethodHS256, hsSecret, "", with(func(c jwt.MapClaims) { c["sub"] = "" })), "", ""},
		// A signed sub is the user, whatever it holds: the limiter keys a
		// long or odd one by its digest, as every entry point does.
		{"sub with a control character", hs, sign(t, jwt.SigningMethodHS256, hsSecret, "", with(func(c jwt.MapClaims) { c["sub"] = "a\nb" })), "a\nb", "pro"},
		{"sub of 257 bytes", hs, sign(t, jwt.SigningMethodHS256, hsSecret, "", with(func(c jwt.MapClaims) { c["sub"] = strings.Repeat("a", 257) })), strings.Repeat("a", 257), "pro"},
		{"wrong issuer", JWTConfig{HS256Secret: hsSecret, Now: now, Issuer: "idp"},
			sign(t, jwt.SigningMethodHS256, hsSecret, "", with(func(c jwt.MapClaims) { c["iss"] = "evil" })), "", ""},
		{"wrong audience", JWTConfig{HS256Secret: hsSecret, Now: now, Audience: "api"},
			sign(t, jwt.SigningMethodHS256, hsSecret, "", with(func(c jwt.MapClaims) { c["aud"] = "web" })), "", ""},
		{"forged: payload swapped", hs, forge(sign(t, jwt.SigningMethodHS256, hsSecret, "", good), "mallory"), "", ""},
		{"garbage", hs, "not.a.token", "", ""},
		{"oversized", hs, strings.Repeat("a", maxToken+1), "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := NewJWTVerifier(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			user, plan, err := v.Verify(tt.token)
			if user != tt.wantUser || plan != tt.wantPlan {
				t.Errorf("Verify = %q, %q (%v), want %q, %q", user, plan, err, tt.wantUser, tt.wantPlan)
			}
			if (err == nil) != (tt.wantUser != "") {
				t.Errorf("Verify error = %v, want error: %v", err, tt.wantUser == "")
			}
		})
	}
}

// forge replaces the sub of a signed token's payload, keeping the
// signature.
func forge(tok, sub string) string {
	parts := strings.Split(tok, ".")
	payload, _ := json.Marshal(claims(sub, "enterprise", nil))
	return parts[0] + "." + b64(payload) + "." + parts[2]
}

func mustParse(t testing.TB, data []byte) []PublicKey {
	t.Helper()
	keys, err := ParsePublicKeys(data)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func TestLoadPublicKeys(t *testing.T) {
	k := testKeys()
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name    string
		data    []byte
		want    int    // keys
		wantErr string // error substring
	}{
		{"two PEM keys", append(pkix1(t, &k.rsa.PublicKey), pkix1(t, &k.ec.PublicKey)...), 2, ""},
		{"JWKS", jwksOf(t, map[string]any{"a": &k.rsa.PublicKey, "b": &k.ec.PublicKey}), 2, ""},
		{"JWKS with leading space", append([]byte("\n  "), jwksOf(t, map[string]any{"a": &k.ec.PublicKey})...), 1, ""},
		{"empty", nil, 0, "no RSA or EC P-256 public key"},
		{"JWKS of unsupported keys", []byte(`{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`), 0, "no RSA or EC P-256 public key"},
		{"private key PEM", pemOf(t, "PRIVATE KEY", []byte{1, 2, 3}), 0, `"PRIVATE KEY"`},
		{"broken PEM body", pemOf(t, "PUBLIC KEY", []byte{1, 2, 3}), 0, "PEM block 1"},
		{"broken JWKS", []byte(`{"keys": [`), 0, "JWKS"},
		{"JWKS EC point off the curve", []byte(`{"keys":[{"kty":"EC","crv":"P-256","x":"` + b64(make([]byte, 32)) + `","y":"` + b64(make([]byte, 32)) + `"}]}`), 0, "not a point on P-256"},
		{"JWKS RSA without n", []byte(`{"keys":[{"kty":"RSA","e":"AQAB"}]}`), 0, `"n" and "e"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys, err := LoadPublicKeys(write(strings.ReplaceAll(tt.name, " ", "_"), tt.data))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("LoadPublicKeys error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || len(keys) != tt.want {
				t.Fatalf("LoadPublicKeys = %d keys, %v, want %d", len(keys), err, tt.want)
			}
		})
	}
	if _, err := LoadPublicKeys(filepath.Join(dir, "missing.pem")); err == nil {
		t.Error("LoadPublicKeys(missing file) = nil error")
	}
}

func TestNewJWTVerifierRefuses(t *testing.T) {
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  JWTConfig
		want string
	}{
		{"nothing", JWTConfig{}, "no HS256 secret and no public key"},
		{"small RSA key", JWTConfig{Keys: []PublicKey{{Key: &small.PublicKey}}}, "at least 2048 bits"},
		{"private key", JWTConfig{Keys: []PublicKey{{Key: small}}}, "not an RSA or ECDSA P-256 public key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewJWTVerifier(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewJWTVerifier error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}
