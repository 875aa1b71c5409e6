package middleware

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	planname "github.com/sluicehq/sluice/internal/plan"
)

// DefaultPlanClaim is the claim a token's plan is read from by default.
const DefaultPlanClaim = "plan"

// maxToken bounds the length of a bearer token that is looked at: a longer
// one is not parsed (the caller is anonymous).
const maxToken = 8 << 10

// JWTConfig says which bearer tokens are trusted. At least one of
// HS256Secret and Keys is required; the algorithms accepted are exactly
// those a key is configured for: HS256 with HS256Secret, RS256 with an RSA
// key, ES256 with an ECDSA P-256 key. Every other algorithm, "none"
// included, is refused.
type JWTConfig struct {
	// HS256Secret is the shared secret of HS256 tokens; empty: HS256 is not
	// accepted.
	HS256Secret []byte
	// Keys are the public keys of RS256 and ES256 tokens (see
	// ParsePublicKeys). A token whose header names a kid is checked against
	// the keys with that ID, else against the keys without an ID.
	Keys []PublicKey
	// PlanClaim is the claim holding the caller's plan. Default "plan". A
	// missing claim, or one that is not a valid plan name, leaves the plan
	// to the client registry.
	PlanClaim string
	// Issuer, when set, must equal the token's iss.
	Issuer string
	// Audience, when set, must be one of the token's aud.
	Audience string
	// Leeway is the clock skew tolerated when checking exp, nbf and iat.
	// Default 0: a token is expired the second its exp passes.
	Leeway time.Duration
	// Now is the clock tokens are checked against. Default time.Now.
	Now func() time.Time
}

// PublicKey is a token verification key: an *rsa.PublicKey (RS256) or an
// *ecdsa.PublicKey on P-256 (ES256), with the key ID a JWKS gave it.
type PublicKey struct {
	ID  string // JWKS "kid"; "" for a PEM key
	Key crypto.PublicKey
}

// JWTVerifier checks bearer tokens. Build it with NewJWTVerifier; it is
// immutable and safe for concurrent use.
type JWTVerifier struct {
	parser    *jwt.Parser
	hs        []byte
	rsa, ec   []PublicKey
	planClaim string
}

// NewJWTVerifier returns a verifier of the tokens cfg describes.
func NewJWTVerifier(cfg JWTConfig) (*JWTVerifier, error) {
	v := &JWTVerifier{hs: cfg.HS256Secret, planClaim: cfg.PlanClaim}
	if v.planClaim == "" {
		v.planClaim = DefaultPlanClaim
	}
	var methods []string
	if len(v.hs) > 0 {
		methods = append(methods, jwt.SigningMethodHS256.Alg())
	}
	for i, k := range cfg.Keys {
		switch pk := k.Key.(type) {
		case *rsa.PublicKey:
			if pk.N == nil || pk.N.BitLen() < 2048 {
				return nil, fmt.Errorf("middleware: jwt key %d (%q): RSA keys must have at least 2048 bits", i, k.ID)
			}
			v.rsa = append(v.rsa, k)
		case *ecdsa.PublicKey:
			if pk.Curve != elliptic.P256() {
				return nil, fmt.Errorf("middleware: jwt key %d (%q): ECDSA keys must be on P-256 (ES256)", i, k.ID)
			}
			v.ec = append(v.ec, k)
		default:
			return nil, fmt.Errorf("middleware: jwt key %d (%q): %T is not an RSA or ECDSA P-256 public key", i, k.ID, k.Key)
		}
	}
	if len(v.rsa) > 0 {
		methods = append(methods, jwt.SigningMethodRS256.Alg())
	}
	if len(v.ec) > 0 {
		methods = append(methods, jwt.SigningMethodES256.Alg())
	}
	if len(methods) == 0 {
		return nil, errors.New("middleware: jwt: no HS256 secret and no public key")
	}
	opts := []jwt.ParserOption{jwt.WithValidMethods(methods), jwt.WithIssuedAt()}
	if cfg.Leeway > 0 {
		opts = append(opts, jwt.WithLeeway(cfg.Leeway))
	}
	if cfg.Now != nil {
		opts = append(opts, jwt.WithTimeFunc(cfg.Now))
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	v.parser = jwt.NewParser(opts...)
	return v, nil
}

// Verify checks token (without the "Bearer " prefix): its algorithm is
// one JWTConfig allows, its signature is right, it is neither expired nor
// not yet valid (nor issued in the future), and its issuer and audience
// are the configured ones. It returns the token's sub as the user and the plan
// claim (or "" when absent or not a valid plan name). A token whose sub is
// not a non-empty string is refused; any such string is the user, keyed as
// package identity keys every user (a long or odd one by its digest), the
// same as through the decision and Envoy APIs.
func (v *JWTVerifier) Verify(token string) (user, plan string, err error) {
	if len(token) > maxToken {
		return "", "", fmt.Errorf("middleware: jwt: token longer than %d bytes", maxToken)
	}
	claims := jwt.MapClaims{}
	if _, err := v.parser.ParseWithClaims(token, claims, v.key); err != nil {
		return "", "", fmt.Errorf("middleware: jwt: %w", err)
	}
	sub, _ := claims["sub"].(string)
	if sub == "" {
		return "", "", errors.New("middleware: jwt: sub must be a non-empty string")
	}
	if p, ok := claims[v.planClaim].(string); ok && planname.Valid(p) {
		plan = p
	}
	return sub, plan, nil
}

// key is the jwt.Keyfunc: the keys of the token's algorithm, narrowed to
// its kid when it names one. The parser has already refused algorithms
// not in Methods.
func (v *JWTVerifier) key(t *jwt.Token) (any, error) {
	var keys []PublicKey
	switch t.Method.Alg() {
	case "HS256":
		return v.hs, nil
	case "RS256":
		keys = v.rsa
	case "ES256":
		keys = v.ec
	default:
		return nil, fmt.Errorf("algorithm %q not accepted", t.Method.Alg())
	}
	kid, _ := t.Header["kid"].(string)
	var set jwt.VerificationKeySet
	if kid == "" {
		for _, k := range keys {
			set.Keys = append(set.Keys, k.Key)
		}
	} else {
		// Keys that carry exactly this kid first, then keys without an ID.
		var anon []jwt.VerificationKey
		for _, k := range keys {
			switch k.ID {
			case kid:
				set.Keys = append(set.Keys, k.Key)
			case "":
				anon = append(anon, k.Key)
			}
		}
		set.Keys = append(set.Keys, anon...)
	}
	if len(set.Keys) == 0 {
		return nil, fmt.Errorf("no %s key with kid %q", t.Method.Alg(), kid)
	}
	return set, nil
}

// LoadPublicKeys reads a file of token verification keys: PEM (see
// ParsePublicKeys) or a JWKS document.
func LoadPublicKeys(path string) ([]PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("middleware: jwt keys: %w", err)
	}
	keys, err := ParsePublicKeys(data)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return keys, nil
}

// ParsePublicKeys parses token verification keys. data is either a JWKS
// document ({"keys": [...]}, starting with "{") — RSA keys ("kty": "RSA")
// and EC P-256 keys ("kty": "EC", "crv": "P-256"); keys meant for
// encryption ("use": "enc") or for another algorithm are skipped — or one
// or more PEM blocks: "PUBLIC KEY" (PKIX), "RSA PUBLIC KEY" (PKCS #1) or
// "CERTIFICATE" (its public key). It fails when no usable key is found.
func ParsePublicKeys(data []byte) ([]PublicKey, error) {
	var keys []PublicKey
	var err error
	if trimmed := strings.TrimSpace(string(data)); strings.HasPrefix(trimmed, "{") {
		keys, err = parseJWKS([]byte(trimmed))
	} else {
		keys, err = parsePEM(data)
	}
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, errors.New("middleware: jwt keys: no RSA or EC P-256 public key found")
	}
	return keys, nil
}

func parsePEM(data []byte) ([]PublicKey, error) {
	var keys []PublicKey
	for n := 1; ; n++ {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		var k any
		var err error
		switch b.Type {
		case "PUBLIC KEY":
			k, err = x509.ParsePKIXPublicKey(b.Bytes)
		case "RSA PUBLIC KEY":
			k, err = x509.ParsePKCS1PublicKey(b.Bytes)
		case "CERTIFICATE":
			var c *x509.Certificate
			if c, err = x509.ParseCertificate(b.Bytes); err == nil {
				k = c.PublicKey
			}
		default:
			return nil, fmt.Errorf("middleware: jwt keys: PEM block %d is a %q, want PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE", n, b.Type)
		}
		if err != nil {
			return nil, fmt.Errorf("middleware: jwt keys: PEM block %d (%s): %w", n, b.Type, err)
		}
		keys = append(keys, PublicKey{Key: k})
	}
	return keys, nil
}

// jwk is one key of a JWKS document (RFC 7517, 7518): the members sluice
// reads.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	N   string `json:"n"`
	E   string `json:"e"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

func parseJWKS(data []byte) ([]PublicKey, error) {
	var doc struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("middleware: jwt keys: JWKS: %w", err)
	}
	var keys []PublicKey
	for i, k := range doc.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		fail := func(msg string) error {
			return fmt.Errorf("middleware: jwt keys: JWKS keys[%d] (kid %q): %s", i, k.Kid, msg)
		}
		switch k.Kty {
		case "RSA":
			if k.Alg != "" && k.Alg != "RS256" {
				continue
			}
			n, err1 := b64int(k.N)
			e, err2 := b64int(k.E)
			if err1 != nil || err2 != nil || n.Sign() <= 0 || !e.IsInt64() || e.Int64() < 3 || e.Int64() > 1<<31-1 {
				return nil, fail(`"n" and "e" must be base64url big-endian integers`)
			}
			keys = append(keys, PublicKey{ID: k.Kid, Key: &rsa.PublicKey{N: n, E: int(e.Int64())}})
		case "EC":
			if k.Crv != "P-256" || (k.Alg != "" && k.Alg != "ES256") {
				continue
			}
			x, err1 := base64.RawURLEncoding.DecodeString(k.X)
			y, err2 := base64.RawURLEncoding.DecodeString(k.Y)
			if err1 != nil || err2 != nil || len(x) != 32 || len(y) != 32 {
				return nil, fail(`"x" and "y" must be 32-byte base64url coordinates`)
			}
			pk, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
			if err != nil {
				return nil, fail("not a point on P-256")
			}
			keys = append(keys, PublicKey{ID: k.Kid, Key: pk})
		}
	}
	return keys, nil
}

func b64int(s string) (*big.Int, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, err
	}
	return new(big.Int).SetBytes(b), nil
}
