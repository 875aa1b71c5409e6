package redis_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/testkit/conformance"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/limiter"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// TestReserveRestartedEmpty measures what a Redis that restarts empty
// costs an egress budget: its reservation queue is forgotten, and the
// slots it hands out next start at once, beside the slots handed out
// before the restart that callers still wait for. Two instances reserve
// from a budget of 50 a second (a leaky bucket: two at once, one each
// 20 ms after) with a wait of up to 1 s, as fast as they get answers, and
// Redis is restarted empty in the middle. The slots sent over the budget
// (those a leaky bucket run over every slot handed out, in order, denies)
// are at most what was queued at the restart: the rate times the longest
// wait, plus the burst (docs/egress.md).
func TestReserveRestartedEmpty(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a redis-server under load")
	}
	srv := redistest.Start(t)
	stores := []*sredis.Store{newStore(t, nil, srv.Addr()), newStore(t, nil, srv.Addr())}
	p := algorithm.Params{Kind: algorithm.LeakyBucket, Limit: 50, Window: conformance.Second}
	const maxWait = conformance.Second
	var (
		mu    sync.Mutex
		slots []int64
		wg    sync.WaitGroup
	)
	end := time.Now().Add(3 * time.Second)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ops := []limiter.Op{{Client: "user:partner", Rule: "egress", Params: p, Cost: 1}}
			res := make([]algorithm.Result, 1)
			for time.Now().Before(end) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				info, wait, err := stores[g%2].Reserve(ctx, ops, res, maxWait)
				cancel()
				if err != nil {
					time.Sleep(10 * time.Millisecond) // Redis restarting
					continue
				}
				if !res[0].Allowed {
					time.Sleep(time.Duration(res[0].RetryAfter) * time.Microsecond)
					continue
				}
				mu.Lock()
				slots = append(slots, info.Now+wait)
				mu.Unlock()
			}
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	srv.Restart()
	wg.Wait()
	slices.Sort(slots)
	// A leaky bucket of 50 a second, burst 1, over the slots in order.
	const interval, burst = 20_000, 1
	var tat int64
	over := 0
	for _, s := range slots {
		if s < tat-burst*interval {
			over++
			continue
		}
		tat = max(tat, s) + interval
	}
	bound := int(p.Limit*maxWait/p.Window) + burst + 1
	t.Logf("%d slots handed out over about 4 s, %d over the budget of 50 a second (bound: %d, the queue at the restart)", len(slots), over, bound)
	if over > bound {
		t.Errorf("%d slots over the budget after a restart, want at most %d", over, bound)
	}
}
