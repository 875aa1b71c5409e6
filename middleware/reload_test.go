package middleware_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/middleware"
)

// TestRuleChangesApplyToTheNextRequest: a rule change put in force on the
// limiter decides the next request through the middleware, on buckets that
// already exist, with no time passing. Fixed windows keep their counts
// against the new limit, so the numbers are exact.
func TestRuleChangesApplyToTheNextRequest(t *testing.T) {
	const (
		limit2 = "rules:\n  - {id: per-ip, by: ip, limit: 2, window: 1h, algorithm: fixed_window}\n"
		limit5 = "rules:\n  - {id: per-ip, by: ip, limit: 5, window: 1h, algorithm: fixed_window}\n"
		limit1 = "rules:\n  - {id: per-ip, by: ip, limit: 1, window: 1h, algorithm: fixed_window}\n"
		other  = "rules:\n  - {id: login, match: {endpoint: \"POST /login\"}, by: ip, limit: 1, window: 1h, algorithm: fixed_window}\n"
	)
	l := newLimiter(t, limit2)
	next := &counter{}
	h := middleware.Middleware(l)(next)
	// passed makes n calls and reports how many reached next.
	passed := func(n int) int64 {
		before := next.n.Load()
		for range n {
			call{path: "/api/orders"}.do(h)
		}
		return next.n.Load() - before
	}
	if got := passed(3); got != 2 {
		t.Fatalf("under limit 2: %d of 3 calls passed, want 2", got)
	}
	l.SetRules(limitertest.CompileYAML(t, limit5))
	w := call{path: "/api/orders"}.do(h)
	if w.Code != 200 || w.Header().Get("X-RateLimit-Limit") != "5" || w.Header().Get("X-RateLimit-Remaining") != "2" {
		t.Fatalf("raised to 5 after 2 calls: %d, limit %q, remaining %q; want 200, 5, 2",
			w.Code, w.Header().Get("X-RateLimit-Limit"), w.Header().Get("X-RateLimit-Remaining"))
	}
	l.SetRules(limitertest.CompileYAML(t, limit1))
	if w := (call{path: "/api/orders"}).do(h); w.Code != 429 || w.Header().Get("X-RateLimit-Limit") != "1" {
		t.Fatalf("lowered to 1 after 3 calls: %d, limit %q; want 429, 1", w.Code, w.Header().Get("X-RateLimit-Limit"))
	}
	l.SetRules(limitertest.CompileYAML(t, other))
	if got := passed(3); got != 3 {
		t.Fatalf("with the rule removed: %d of 3 calls passed, want 3", got)
	}
	l.SetRules(limitertest.CompileYAML(t, other+"  - {id: orders, match: {endpoint: \"GET /api/orders\"}, by: ip, limit: 1, window: 1h, algorithm: fixed_window}\n"))
	if got := passed(3); got != 1 {
		t.Fatalf("with a new rule on the endpoint (limit 1): %d of 3 calls passed, want 1", got)
	}
}
