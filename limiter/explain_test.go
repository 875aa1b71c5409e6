package limiter_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
)

// TestExplainTakesNothing: Explain reports every matching rule's bucket and
// the decision Check would make, and reading takes nothing.
func TestExplainTakesNothing(t *testing.T) {
	l, _ := newLimiter(t, &rules.Set{Rules: []rules.Rule{
		rule("per-user", 3, time.Minute, nil),
		rule("per-ip", 100, time.Minute, func(r *rules.Rule) { r.By = rules.ByIP }),
		rule("orders", 10, time.Minute, func(r *rules.Rule) { r.Match.Endpoint = "GET /orders" }),
	}})
	req := limiter.Request{User: "alice", IP: "2001:db8::7", Method: "GET", Path: "/api"}
	for range 2 {
		check(t, l, req)
	}
	for i := range 3 {
		ex, err := l.Explain(context.Background(), &req)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"per-user", "per-ip"}; !slices.Equal(ex.Matched, want) {
			t.Fatalf("Matched = %v, want %v", ex.Matched, want)
		}
		if len(ex.Buckets) != 2 || ex.Buckets[0].Client != "user:alice" || ex.Buckets[1].Client != "ip:2001:db8::/64" {
			t.Fatalf("Buckets = %+v, want user:alice and ip:2001:db8::/64", ex.Buckets)
		}
		if got := ex.Buckets[0].Result.Remaining; got != 1 || !ex.Buckets[0].Allows {
			t.Fatalf("explain %d: per-user remaining %d allows %v, want 1 true", i, got, ex.Buckets[0].Allows)
		}
		if !ex.Decision.Allowed || ex.Decision.RuleID() != "per-user" {
			t.Fatalf("Decision = %+v, want allowed under per-user", ex.Decision)
		}
	}
	check(t, l, req) // the last unit
	ex, err := l.Explain(context.Background(), &req)
	if err != nil {
		t.Fatal(err)
	}
	if ex.Decision.Allowed || ex.Buckets[0].Allows || ex.Decision.RuleID() != "per-user" || ex.Decision.RetryAfter <= 0 {
		t.Fatalf("after the quota: %+v, want denied by per-user with a retry", ex)
	}
	if d := check(t, l, req); d.Allowed {
		t.Fatalf("Check after Explain = allowed, want denied as explained")
	}
	r, limit, ok, err := l.PeekBucket(context.Background(), "per-ip", "ip:2001:db8::/64")
	if err != nil || !ok || limit != 100 || r.Remaining != 97 {
		t.Fatalf("PeekBucket(per-ip) = %+v %d %v %v, want remaining 97 of 100", r, limit, ok, err)
	}
}

// TestExplainLimitZero: a rule of limit 0 is explained as Check decides
// it — denied, 0 remaining of 0 — and its bucket reads 0 of 0, not the 1
// of the bucket of 1 the limiter takes it as.
func TestExplainLimitZero(t *testing.T) {
	l, _ := newLimiter(t, &rules.Set{Rules: []rules.Rule{rule("closed", 0, time.Minute, nil)}})
	req := limiter.Request{User: "alice"}
	ex, err := l.Explain(context.Background(), &req)
	if err != nil {
		t.Fatal(err)
	}
	d := check(t, l, req)
	if ex.Decision.Allowed || d.Allowed || ex.Decision.Remaining != 0 || ex.Decision.Reason != d.Reason {
		t.Fatalf("Explain = %+v, Check = %+v; want both denied, 0 remaining", ex.Decision, d)
	}
	if len(ex.Buckets) != 1 || ex.Buckets[0].Limit != 0 || ex.Buckets[0].Result.Remaining != 0 || ex.Buckets[0].Allows {
		t.Fatalf("Buckets = %+v, want one at 0 of 0 that refuses the call", ex.Buckets)
	}
}
