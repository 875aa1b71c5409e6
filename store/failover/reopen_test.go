package failover_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store/failover"
)

// TestFallbackRemembersAcrossOpenings: a caller that used its local
// allowance while Redis was down does not get a fresh one when Redis fails
// again soon after: the local fallback keeps what each caller took across
// the breaker's openings (its buckets refill with time, as Redis's do).
func TestFallbackRemembersAcrossOpenings(t *testing.T) {
	srv, fo, l := startFailover(t, nil)
	ctx := context.Background()
	req := limiter.Request{User: "again", Method: "GET", Path: "/api/orders"}
	state := func() failover.State { st, _ := fo.State(); return st }
	waitState := func(want failover.State, what string) {
		t.Helper()
		for start := time.Now(); state() != want; {
			l.Check(ctx, &limiter.Request{User: "nudge", Method: "GET", Path: "/api/x"}) //nolint:errcheck // failing calls open the breaker
			if time.Since(start) > 10*time.Second {
				t.Fatalf("breaker not %s within 10 s of %s", want, what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	drain := func() (allowed int) {
		for range openLimit {
			d, err := l.Check(ctx, &req)
			if err != nil {
				t.Fatal(err)
			}
			if d.Origin != limiter.OriginLocalFallback {
				t.Fatalf("decision from %s while the breaker is open, want local_fallback", d.Origin)
			}
			if d.Allowed {
				allowed++
			}
		}
		return allowed
	}
	srv.Kill()
	waitState(failover.Open, "the kill")
	first := drain()
	coarse := openLimit / instances
	if first < coarse || first > coarse+5 {
		t.Fatalf("first opening: %d allowed, want the coarse limit %d", first, coarse)
	}
	start := time.Now()
	srv.Restart()
	waitState(failover.Closed, "the restart")
	srv.Kill()
	waitState(failover.Open, "the second kill")
	again := drain()
	// 600 a minute over 2 instances: 5 a second refill locally, since the
	// first opening's calls.
	refill := int(time.Since(start).Seconds()*float64(coarse)/60) + 2
	if again > refill {
		t.Errorf("second opening, %v later: %d allowed locally, want at most the %d the local bucket refilled (it gave %d in the first)",
			time.Since(start).Round(time.Millisecond), again, refill, first)
	}
}
