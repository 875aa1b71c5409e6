package failover_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/failover"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// Reservations go through the shared store; while it is down they are
// denied (store_unavailable), even under a failure_mode: open rule: the
// local fallback never grants a slot.
func TestReserveFailsClosed(t *testing.T) {
	srv, _, l := startFailover(t, func(c *sredis.Config, f *failover.Config) {
		c.Denials, f.Denials, f.Instances = nil, nil, 1
	})
	ix, err := rules.Compile(&rules.Set{Rules: []rules.Rule{{ID: "egress", Match: rules.Match{Plan: "egress"}, By: rules.ByUser,
		Limit: 10, Window: rules.Duration(time.Second), Algorithm: algorithm.LeakyBucket, FailureMode: rules.FailOpen}}})
	if err != nil {
		t.Fatal(err)
	}
	l.SetRules(ix)
	req := limiter.Request{User: "api.partner.example", Plan: "egress"}
	ctx := context.Background()

	var waits []time.Duration
	for start := time.Now(); len(waits) < 3; {
		d, wait, err := l.Reserve(ctx, &req, time.Second)
		if err == nil && d.Origin == limiter.OriginStore && d.Allowed {
			waits = append(waits, wait)
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("no reservation from the store in 10 s (last %+v, %v)", d, err)
		}
	}
	if waits[2] == 0 {
		t.Fatalf("waits %v: the third reservation should wait (two at once, then one each 100 ms)", waits)
	}

	srv.Kill()
	for i := range 20 {
		d, wait, err := l.Reserve(ctx, &req, time.Second)
		if err != nil {
			t.Fatalf("reservation %d with Redis down: %v, want a denial", i, err)
		}
		if d.Allowed || wait != 0 || d.Reason != algorithm.ReasonStoreUnavailable || d.Origin != limiter.OriginUnavailable {
			t.Fatalf("reservation %d with Redis down = %+v wait %v, want denied, store_unavailable", i, d, wait)
		}
	}
}
