package middleware_test

import (
	"net/netip"
	"testing"

	"github.com/sluicehq/sluice/middleware"
)

// Three clients behind a trusted proxy, each sending a malformed
// forwarding header that the proxy appends the client's address to, land
// in three buckets of their own, never in the proxy's.
func TestMalformedForwardingHeaderNeverNamesTheProxy(t *testing.T) {
	clients := []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"}
	for _, tt := range []struct {
		header    string
		malformed string // what the client sends
		append    func(client string) string
	}{
		{"Forwarded", `for="1.2.3.4`, func(c string) string { return ", for=" + c }},
		{"Forwarded", `for=1.2.3.4;for=5.6.7.8`, func(c string) string { return ", for=" + c }},
		{"Forwarded", `for="1.2.3.4" junk;proto=https`, func(c string) string { return `, for="` + c + `:4711"` }},
		{"Forwarded", `for=_hidden`, func(c string) string { return ", for=" + c }},
		{"X-Forwarded-For", `"1.2.3.4`, func(c string) string { return ", " + c }},
		{"X-Forwarded-For", `[2001:db8::1`, func(c string) string { return ", " + c }},
		{"X-Forwarded-For", `unknown`, func(c string) string { return "," + c + ":5123" }},
	} {
		t.Run(tt.header+" "+tt.malformed, func(t *testing.T) {
			l := newLimiter(t, `
rules:
  - {id: per-ip, by: ip, limit: 1, window: 1h}
`)
			next := &counter{}
			h := middleware.Middleware(l, middleware.WithIdentifier(&middleware.Identifier{
				TrustedProxies:  []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
				ForwardedHeader: tt.header,
			}))(next)
			for _, c := range clients {
				w := call{remote: "10.0.0.2:1234", header: map[string]string{tt.header: tt.malformed + tt.append(c)}}.do(h)
				if w.Code != 200 {
					t.Errorf("client %s: %d, want 200 (its own bucket, limit 1)", c, w.Code)
				}
			}
			// The proxy's own bucket is untouched.
			if w := (call{remote: "10.0.0.2:1234"}).do(h); w.Code != 200 {
				t.Errorf("the proxy itself: %d, want 200 (no client was keyed by its address)", w.Code)
			}
			if n := next.n.Load(); n != 4 {
				t.Errorf("next saw %d of 4 calls, want 4", n)
			}
		})
	}
}
