package failover_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store/failover"
)

// TestDegradedAnswerReportsRuleLimit is what docs/failure.md says a
// degraded answer carries: limit is the rule's limit, the same as with
// Redis (so RateLimit-Policy does not change in an outage), while
// remaining counts down the local bucket of ceil(limit/N).
func TestDegradedAnswerReportsRuleLimit(t *testing.T) {
	srv, fo, l := startFailover(t, nil)
	ctx := context.Background()
	srv.Kill()
	probe := limiter.Request{User: "probe", Method: "GET", Path: "/api/orders"}
	closed := func() bool { st, _ := fo.State(); return st == failover.Closed }
	for deadline := time.Now().Add(10 * time.Second); closed() && time.Now().Before(deadline); {
		l.Check(ctx, &probe) //nolint:errcheck // failing calls open the breaker
	}
	if closed() {
		t.Fatal("breaker did not open within 10 s of the kill")
	}
	d, err := l.Check(ctx, &limiter.Request{User: "fresh", Method: "GET", Path: "/api/orders"})
	local := int64((openLimit + instances - 1) / instances)
	if err != nil || !d.Allowed || d.Origin != limiter.OriginLocalFallback || d.Limit != openLimit || d.Remaining != local-1 {
		t.Errorf("degraded answer: %+v, %v; want allowed by the local fallback, limit %d (the rule's), remaining %d (of ceil(%d/%d))",
			d, err, openLimit, local-1, openLimit, instances)
	}
}
