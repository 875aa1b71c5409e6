package gateway_test

import (
	"net/http"
	"slices"
	"testing"
)

// TestRuleChangesReachTheProxy: a rule change put in force on the limiter
// decides the next proxied request: a removed rule stops limiting, a new
// one starts. Windows of a day, so that the real clock's few milliseconds
// refill nothing.
func TestRuleChangesReachTheProxy(t *testing.T) {
	up := newUpstream(t, nil)
	l := newLimiter(t, "rules:\n  - {id: per-ip, by: ip, limit: 1, window: 24h}\n")
	gw := newGateway(t, l, up.URL, nil)
	setRules := func(doc string) {
		t.Helper()
		l.SetRules(compile(t, doc))
	}
	// codes makes n calls and returns their status codes.
	codes := func(n int) []int {
		t.Helper()
		var out []int
		for range n {
			resp, _ := get(t, gw.URL+"/api/orders", nil)
			out = append(out, resp.StatusCode)
		}
		return out
	}
	if got := codes(2); !slices.Equal(got, []int{200, 429}) {
		t.Fatalf("under per-ip (1 a day): %v, want 200 then 429", got)
	}
	setRules("rules:\n  - {id: login, match: {endpoint: \"POST /login\"}, by: ip, limit: 1, window: 24h}\n")
	if got := codes(3); !slices.Equal(got, []int{200, 200, 200}) {
		t.Fatalf("with per-ip removed: %v, want 200 three times", got)
	}
	setRules("rules:\n  - {id: orders, match: {endpoint: \"GET /api/orders\"}, by: ip, limit: 2, window: 24h}\n")
	if got := codes(3); !slices.Equal(got, []int{200, 200, 429}) {
		t.Fatalf("with orders (2 a day) added: %v, want 200, 200, 429", got)
	}
	resp, _ := get(t, gw.URL+"/api/orders", nil)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("RateLimit-Policy") != `"orders";q=2;w=86400` {
		t.Fatalf("next call: %d, RateLimit-Policy %q; want 429 under orders", resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
	}
}
