package middleware

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicehq/sluice/identity"
	"github.com/sluicehq/sluice/internal/testkit/limitertest"
)

func TestIdentifyIP(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	tests := []struct {
		name      string
		remote    string
		trusted   []netip.Prefix
		forwarded string              // Identifier.ForwardedHeader
		header    map[string][]string // request headers
		want      string
	}{
		{"no proxies, no header", "198.51.100.7:5555", nil, "", nil, "198.51.100.7"},
		{"no proxies, spoofed XFF", "198.51.100.7:5555", nil, "",
			map[string][]string{"X-Forwarded-For": {"1.2.3.4"}}, "198.51.100.7"},
		{"untrusted peer, spoofed XFF", "198.51.100.7:5555", proxies, "",
			map[string][]string{"X-Forwarded-For": {"1.2.3.4, 10.0.0.1"}}, "198.51.100.7"},
		{"untrusted peer, spoofed Forwarded", "198.51.100.7:5555", proxies, HeaderForwarded,
			map[string][]string{"Forwarded": {"for=1.2.3.4"}}, "198.51.100.7"},
		{"trusted peer, one hop", "10.0.0.2:5555", proxies, "",
			map[string][]string{"X-Forwarded-For": {"198.51.100.7"}}, "198.51.100.7"},
		{"trusted peer, right-most untrusted", "10.0.0.2:5555", proxies, "",
			map[string][]string{"X-Forwarded-For": {"1.2.3.4, 198.51.100.7, 10.0.0.5"}}, "198.51.100.7"},
		{"trusted peer, several header lines", "10.0.0.2:5555", proxies, "",
			map[string][]string{"X-Forwarded-For": {"1.2.3.4", "198.51.100.7, 10.0.0.5"}}, "198.51.100.7"},
		{"trusted peer, every hop trusted: left-most", "10.0.0.2:5555", proxies, "",
			map[string][]string{"X-Forwarded-For": {"10.0.0.7, 10.0.0.5"}}, "10.0.0.7"},
		{"trusted peer, garbage hop: the trusted hop after it", "10.0.0.2:5555", proxies, "",
			map[string][]string{"X-Forwarded-For": {"1.2.3.4, garbage, 10.0.0.5"}}, "10.0.0.5"},
		{"trusted peer, hop with a port", "10.0.0.2:5555", proxies, "",
			map[string][]string{"X-Forwarded-For": {"198.51.100.7:4567"}}, "198.51.100.7"},
		{"trusted peer, no header", "10.0.0.2:5555", proxies, "", nil, "10.0.0.2"},
		{"trusted peer, empty header", "10.0.0.2:5555", proxies, "",
			map[string][]string{"X-Forwarded-For": {""}}, "10.0.0.2"},
		{"trusted IPv6 peer, IPv6 client", "[fd00::1]:5555", proxies, "",
			map[string][]string{"X-Forwarded-For": {"2001:db8::1"}}, "2001:db8::1"},
		{"trusted IPv4-mapped peer", "[::ffff:10.0.0.2]:5555", proxies, "",
			map[string][]string{"X-Forwarded-For": {"198.51.100.7"}}, "198.51.100.7"},
		{"Forwarded, right-most untrusted", "10.0.0.2:5555", proxies, HeaderForwarded,
			map[string][]string{"Forwarded": {`for=1.2.3.4, for="[2001:db8::9]:80";proto=https, for=10.0.0.5`},
				"X-Forwarded-For": {"5.6.7.8"}}, "2001:db8::9"},
		{"Forwarded wanted, only XFF sent", "10.0.0.2:5555", proxies, HeaderForwarded,
			map[string][]string{"X-Forwarded-For": {"5.6.7.8"}}, "10.0.0.2"},
		{"XFF wanted, only Forwarded sent", "10.0.0.2:5555", proxies, "",
			map[string][]string{"Forwarded": {"for=5.6.7.8"}}, "10.0.0.2"},
		{"Forwarded named in lower case", "10.0.0.2:5555", proxies, "forwarded",
			map[string][]string{"Forwarded": {"for=1.2.3.4"}, "X-Forwarded-For": {"5.6.7.8"}}, "1.2.3.4"},
		{"Forwarded unknown", "10.0.0.2:5555", proxies, HeaderForwarded,
			map[string][]string{"Forwarded": {"for=unknown"}}, "10.0.0.2"},
		{"no address (Unix socket)", "@", proxies, "", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := &Identifier{TrustedProxies: tt.trusted, ForwardedHeader: tt.forwarded}
			r := newRequest(tt.remote)
			for k, v := range tt.header {
				r.Header[k] = v
			}
			if got := id.Identify(r, nil); got.IP != tt.want || got.User != "" || got.APIKey != "" {
				t.Errorf("Identify(%s, %v) = %+v, want IP %q only", tt.remote, tt.header, got, tt.want)
			}
			a, ok := id.ClientAddr(r)
			if ok != (tt.want != "") || (ok && a != netip.MustParseAddr(tt.want)) {
				t.Errorf("ClientAddr = %v, %v, want %q", a, ok, tt.want)
			}
		})
	}
}

func TestTrustsAddr(t *testing.T) {
	id := &Identifier{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}}
	for a, want := range map[string]bool{
		"10.1.2.3": true, "11.1.2.3": false, "fd00::1": true, "fd00::1%eth0": true, "::ffff:10.0.0.1": true,
		"2001:db8::1": false, "::ffff:11.0.0.1": false,
	} {
		if got := id.TrustsAddr(netip.MustParseAddr(a)); got != want {
			t.Errorf("TrustsAddr(%s) = %v, want %v", a, got, want)
		}
	}
	if (&Identifier{}).TrustsAddr(netip.MustParseAddr("10.1.2.3")) {
		t.Error("an Identifier without trusted proxies trusts an address")
	}
}

func TestIdentifyAPIKeyAndUser(t *testing.T) {
	ix := limitertest.CompileYAML(t, `
clients:
  "api_key:k_live_42": {plan: partner}
  "user:bob": {plan: gold}
rules: []
`)
	k := testKeys()
	v, err := NewJWTVerifier(JWTConfig{HS256Secret: hsSecret, Now: func() time.Time { return testNow }})
	if err != nil {
		t.Fatal(err)
	}
	valid := "Bearer " + sign(t, jwt.SigningMethodHS256, hsSecret, "", claims("alice", "pro", nil))
	expired := "Bearer " + sign(t, jwt.SigningMethodHS256, hsSecret, "", claims("alice", "pro", func(c jwt.MapClaims) {
		c["exp"] = testNow.Add(-time.Second).Unix()
	}))
	foreign := "Bearer " + sign(t, jwt.SigningMethodRS256, k.rsa, "", claims("alice", "pro", nil))
	tests := []struct {
		name   string
		header string // API key header name; "" for the default
		h      map[string][]string
		want   Caller
	}{
		{"registered key", "", map[string][]string{"X-Api-Key": {"k_live_42"}}, Caller{Identity: identity.Identity{APIKey: "k_live_42"}}},
		{"unknown key", "", map[string][]string{"X-Api-Key": {"k_random_1"}}, Caller{}},
		{"user id as key", "", map[string][]string{"X-Api-Key": {"user:bob"}}, Caller{}},
		{"two key headers", "", map[string][]string{"X-Api-Key": {"k_live_42", "k_live_42"}}, Caller{}},
		{"oversized key", "", map[string][]string{"X-Api-Key": {strings.Repeat("k", 300)}}, Caller{}},
		{"custom header", "authorization-key", map[string][]string{"Authorization-Key": {"k_live_42"}}, Caller{Identity: identity.Identity{APIKey: "k_live_42"}}},
		{"custom header, key in the default one", "Authorization-Key", map[string][]string{"X-Api-Key": {"k_live_42"}}, Caller{}},
		{"valid token", "", map[string][]string{"Authorization": {valid}}, Caller{Identity: identity.Identity{User: "alice"}, Plan: "pro"}},
		{"lower-case scheme", "", map[string][]string{"Authorization": {"bearer" + valid[6:]}}, Caller{Identity: identity.Identity{User: "alice"}, Plan: "pro"}},
		{"valid token and key", "", map[string][]string{"Authorization": {valid}, "X-Api-Key": {"k_live_42"}},
			Caller{Identity: identity.Identity{User: "alice", APIKey: "k_live_42"}, Plan: "pro"}},
		{"expired token", "", map[string][]string{"Authorization": {expired}}, Caller{}},
		{"token of another algorithm", "", map[string][]string{"Authorization": {foreign}}, Caller{}},
		{"basic auth", "", map[string][]string{"Authorization": {"Basic YWxpY2U6c2VjcmV0"}}, Caller{}},
		{"two tokens", "", map[string][]string{"Authorization": {valid, valid}}, Caller{}},
		{"empty bearer", "", map[string][]string{"Authorization": {"Bearer "}}, Caller{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := &Identifier{JWT: v, APIKeyHeader: tt.header}
			r := newRequest("198.51.100.7:5555")
			for k, v := range tt.h {
				r.Header[k] = v
			}
			tt.want.IP = "198.51.100.7"
			if got := id.Identify(r, ix); got != tt.want {
				t.Errorf("Identify(%v) = %+v, want %+v", tt.h, got, tt.want)
			}
		})
	}
	t.Run("no rules", func(t *testing.T) {
		r := newRequest("198.51.100.7:5555")
		r.Header.Set("X-API-Key", "k_live_42")
		if got := (&Identifier{}).Identify(r, nil); got.APIKey != "" {
			t.Errorf("Identify with no rules = %+v, want no API key", got)
		}
	})
}

func TestIdentifyAllocs(t *testing.T) {
	ix := limitertest.CompileYAML(t, `
clients:
  "api_key:k_live_42": {plan: partner}
rules: []
`)
	id := &Identifier{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	r := newRequest("10.0.0.2:5555")
	r.Header.Set("X-API-Key", "k_live_42")
	r.Header.Set("X-Forwarded-For", "1.2.3.4, 198.51.100.7, 10.0.0.5")
	var c Caller
	if n := testing.AllocsPerRun(100, func() { c = id.Identify(r, ix) }); n != 0 {
		t.Errorf("Identify allocates %v times, want 0", n)
	}
	if c.APIKey != "k_live_42" || c.IP != "198.51.100.7" {
		t.Errorf("Identify = %+v", c)
	}
}
