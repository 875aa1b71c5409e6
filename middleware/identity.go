package middleware

import (
	"net/http"
	"net/netip"
	"strings"

	"github.com/sluicehq/sluice/identity"
	"github.com/sluicehq/sluice/rules"
)

// DefaultAPIKeyHeader is the header an API key is read from by default.
const DefaultAPIKeyHeader = "X-API-Key"

// Caller is who a request comes from, as far as it can be trusted: the
// user of a verified token, a registered API key, and the client's address.
// Any field may be empty.
type Caller struct {
	identity.Identity
	// Plan is the verified token's plan claim, "" when there is none: the
	// limiter then takes the plan from the client registry.
	Plan string
}

// Identifier works out who an HTTP request comes from, trusting nothing a
// caller could forge:
//
//   - User: the sub of a bearer token (Authorization: Bearer <jwt>) that
//     JWT verifies, and its plan claim. No JWT verifier, no token, or a
//     token that fails verification (expired, not yet valid, wrongly
//     signed, alg "none" or another algorithm than the configured ones):
//     no user.
//   - APIKey: the APIKeyHeader's value, only when its client id is in the
//     client registry of the rules in force ("api_key:<key>", or
//     "api_key:h:<hex>" for a key keyed by its digest, see package
//     identity); an unknown key is ignored, so that inventing keys cannot
//     buy fresh buckets.
//   - IP: the connection's peer address. Only when the peer is one of
//     TrustedProxies is the forwarding header (ForwardedHeader) read, and
//     the address taken is the right-most one of the chain that is not a
//     trusted proxy.
//
// The zero value trusts no token, reads API keys from X-API-Key, and keys
// callers by their peer address. An Identifier must not be changed once in
// use; it is then safe for concurrent use.
type Identifier struct {
	// JWT verifies bearer tokens; nil: calls carry no user.
	JWT *JWTVerifier
	// APIKeyHeader names the header API keys are read from. Default
	// DefaultAPIKeyHeader ("X-API-Key").
	APIKeyHeader string
	// TrustedProxies are the peers whose forwarding header is believed
	// (see ParseTrustedProxies). Default none: the peer is the caller.
	TrustedProxies []netip.Prefix
	// ForwardedHeader is the header trusted proxies name the client in:
	// HeaderXForwardedFor (default) or HeaderForwarded. Only one is read,
	// since a proxy that appends to one passes the other through from the
	// client unchecked.
	ForwardedHeader string
}

// Identify returns the caller of r. ix is the rules in force, whose client
// registry decides which API keys are trusted (nil: none is). Identify
// allocates nothing unless a bearer token is verified.
func (id *Identifier) Identify(r *http.Request, ix *rules.Index) Caller {
	var c Caller
	c.IP = id.clientHost(r)
	if id.JWT != nil {
		if tok, ok := bearer(r.Header["Authorization"]); ok {
			if user, plan, err := id.JWT.Verify(tok); err == nil {
				c.User, c.Plan = user, plan
			}
		}
	}
	name := id.APIKeyHeader
	if name == "" {
		name = DefaultAPIKeyHeader
	}
	if v := r.Header[canonical(name)]; len(v) == 1 && registered(ix, v[0]) {
		c.APIKey = v[0]
	}
	return c
}

// canonical returns the canonical form of a header name, without
// allocating or looking at its bytes for the default (Middleware has made
// it "X-Api-Key").
func canonical(name string) string {
	if name == DefaultAPIKeyHeader || name == "X-Api-Key" {
		return "X-Api-Key"
	}
	return http.CanonicalHeaderKey(name)
}

// registered reports whether key is a registered API key of ix
// (rules.Index.RegisteredAPIKey).
func registered(ix *rules.Index, key string) bool { return ix.RegisteredAPIKey(key) }

// bearer returns the token of an "Authorization: Bearer <token>" header
// (the scheme is case-insensitive). More than one Authorization header is
// no token.
func bearer(v []string) (string, bool) {
	if len(v) != 1 {
		return "", false
	}
	s := v[0]
	const scheme = "bearer "
	if len(s) <= len(scheme) || !strings.EqualFold(s[:len(scheme)], scheme) {
		return "", false
	}
	tok := strings.TrimSpace(s[len(scheme):])
	return tok, tok != ""
}

// Peer returns the address of r's connection (RemoteAddr); ok is false
// when it holds none (e.g. a Unix socket).
func Peer(r *http.Request) (netip.Addr, bool) {
	a, _, ok := hostOf(r.RemoteAddr)
	return a, ok
}

// TrustsAddr reports whether a, the address of a request's connection
// (Peer), is one of the trusted proxies, so that its forwarding headers
// are believed.
func (id *Identifier) TrustsAddr(a netip.Addr) bool {
	return len(id.TrustedProxies) > 0 && trusted(id.TrustedProxies, a)
}

// ClientAddr returns the address r is keyed by (see Identifier); ok is
// false when there is none.
func (id *Identifier) ClientAddr(r *http.Request) (netip.Addr, bool) {
	a, _, ok := id.client(r)
	return a, ok
}

// clientHost is ClientAddr as text: a substring of RemoteAddr or of the
// forwarding header, without brackets or port. "" when there is none.
func (id *Identifier) clientHost(r *http.Request) string {
	_, host, _ := id.client(r)
	return host
}

func (id *Identifier) client(r *http.Request) (netip.Addr, string, bool) {
	peer, host, ok := hostOf(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, "", false
	}
	if len(id.TrustedProxies) == 0 || !trusted(id.TrustedProxies, peer) {
		return peer, host, true
	}
	if readsForwarded(id.ForwardedHeader) {
		a, h := clientFromForwarded(r.Header[HeaderForwarded], id.TrustedProxies, peer, host)
		return a, h, true
	}
	a, h := clientFromXFF(r.Header[HeaderXForwardedFor], id.TrustedProxies, peer, host)
	return a, h, true
}

// readsForwarded reports whether the forwarding header name is
// HeaderForwarded, in any case: CanonicalHeaderKey(name) ==
// HeaderForwarded, without canonicalising the name on every call.
func readsForwarded(name string) bool {
	return name == HeaderForwarded || len(name) == len(HeaderForwarded) && http.CanonicalHeaderKey(name) == HeaderForwarded
}
