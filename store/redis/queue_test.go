package redis_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/testkit/conformance"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store/memory"
)

// queueStore is what TestCheckKeepsReservations uses of a store.
type queueStore interface {
	limiter.Store
	limiter.Reserver
}

// TestCheckKeepsReservations: a check of a bucket that holds reservations
// is denied until they have passed and erases none of them, so the next
// reservation queues behind them, on Redis (both script paths) and the
// embedded store alike (issue 27 §7: one POST /ratelimit/check forgot the
// whole queue, and later reservations got slots already handed out).
func TestCheckKeepsReservations(t *testing.T) {
	srv := redistest.Start(t)
	var clock atomic.Int64
	ms, err := memory.New(memory.Config{Clock: clock.Load, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ms.Close() })
	stores := map[string]queueStore{"memory": ms}
	for _, path := range scriptPaths {
		stores["redis "+path.command] = newStorePath(t, &clock, path.evalsha, srv.Addr())
	}
	ctx := context.Background()
	for name, st := range stores {
		for _, kind := range []algorithm.Kind{algorithm.TokenBucket, algorithm.LeakyBucket} {
			t.Run(name+"/"+kind.String(), func(t *testing.T) {
				now := conformance.Base + conformance.Day
				clock.Store(now)
				// 10 a second, one at a time: a slot every 100 ms.
				p := algorithm.Params{Kind: kind, Limit: 10, Window: conformance.Second, Burst: 1}
				if kind == algorithm.LeakyBucket {
					p.Burst = 0 // the conforming call and 1 more at once
				}
				op := limiter.Op{Client: "global", Rule: "queue-" + kind.String() + "-" + strings.ReplaceAll(name, " ", "-"), Params: p, Cost: 1}
				res := make([]algorithm.Result, 1)
				var last int64
				for i := range 20 {
					_, wait, err := st.Reserve(ctx, []limiter.Op{op}, res, conformance.Hour)
					if err != nil || !res[0].Allowed {
						t.Fatalf("reservation %d: %v, %+v", i, err, res[0])
					}
					last = wait
				}
				if _, err := st.Take(ctx, []limiter.Op{op}, res); err != nil || res[0].Allowed {
					t.Fatalf("check of a bucket with 20 reservations queued = %v, %+v; want denied", err, res[0])
				}
				if res[0].RetryAfter < last {
					t.Errorf("check: retry after %dµs, before the last reservation's slot (%dµs)", res[0].RetryAfter, last)
				}
				_, wait, err := st.Reserve(ctx, []limiter.Op{op}, res, conformance.Hour)
				if err != nil || !res[0].Allowed || wait <= last {
					t.Errorf("reservation after a check: wait %dµs (err %v), want after the queue's last slot (%dµs): the check erased the queue", wait, err, last)
				}
			})
		}
	}
}
