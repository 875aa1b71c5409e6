package failover_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/failover"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// busyProcess is the real Redis store behind a delay on the caller's side,
// before anything is sent: what a saturated process does to a call (its
// goroutine waits for a CPU, the call waits in queues) while Redis itself
// is healthy and fast.
type busyProcess struct {
	*sredis.Store
	delay time.Duration
}

func (b busyProcess) Take(ctx context.Context, ops []limiter.Op, res []algorithm.Result) (limiter.TakeInfo, error) {
	t := time.NewTimer(b.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done(): // a queue gives up a call whose caller gave up
		return limiter.TakeInfo{}, ctx.Err()
	}
	return b.Store.Take(ctx, ops, res)
}

// busyFailover is a failover store with cfg over the Redis at addr behind
// busyProcess with delay; it is closed when the test ends.
func busyFailover(t *testing.T, addr string, delay time.Duration, cfg failover.Config) *failover.Store {
	t.Helper()
	rcfg := sredis.DefaultConfig()
	rcfg.Addrs = []string{addr}
	fo := failover.New(func(ctx context.Context) (failover.Primary, error) {
		s, err := sredis.New(ctx, rcfg)
		if err != nil {
			return nil, err
		}
		return busyProcess{s, delay}, nil
	}, cfg)
	t.Cleanup(func() { fo.Close() })
	return fo
}

// TestBusyProcessIsNotARedisFailure: with Redis healthy, calls that spend
// 4× the store timeout in this process before reaching Redis neither open
// the breaker nor get a local answer: every decision is Redis's, and a
// flooding caller gets exactly its limit.
func TestBusyProcessIsNotARedisFailure(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 5 * time.Millisecond
	fo := busyFailover(t, srv.Addr(), 4*timeout,
		failover.Config{Instances: 1, Timeout: timeout, ProbeInterval: 100 * time.Millisecond, Logger: testLogger()})
	const limit = 50
	ix, err := rules.Compile(&rules.Set{Rules: []rules.Rule{
		{ID: "flood", Match: rules.Match{Endpoint: "POST /flood"}, By: rules.ByUser, Limit: limit, Window: rules.Duration(time.Hour)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	l := limiter.New(fo, limiter.Config{})
	l.SetRules(ix)

	var allowed, local atomic.Int64
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				d, err := l.Check(context.Background(), &limiter.Request{User: "flooder", Method: "POST", Path: "/flood"})
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				if d.Allowed {
					allowed.Add(1)
				}
				if d.Origin.Degraded() {
					local.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	st, reason := fo.State()
	if got := fo.Stats().Opened.Load(); got != 0 || st != failover.Closed {
		t.Errorf("breaker opened %d times, now %s (%s); want closed throughout: Redis was healthy", got, st, reason)
	}
	if n := local.Load(); n != 0 {
		t.Errorf("%d of 160 decisions made locally, want 0", n)
	}
	if n := allowed.Load(); n != limit {
		t.Errorf("flooder allowed %d of 160 calls, want exactly the limit %d", n, limit)
	}
}

// TestCallerDeadlineGetsAnAnswer: a caller whose own deadline (Envoy's
// filter timeout arrives as one) comes before the store's answer gets a
// local answer 2 ms before it, not the error a proxy may turn into "allow";
// and that is no verdict on Redis: the breaker stays closed.
func TestCallerDeadlineGetsAnAnswer(t *testing.T) {
	srv := redistest.Start(t)
	fo, l := waitLimiter(t, srv.Addr(), 50*time.Millisecond, failover.Config{Timeout: 5 * time.Millisecond})
	for i := range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		d, err := l.Check(ctx, &limiter.Request{User: "u", Method: "GET", Path: "/api/orders"})
		cancel()
		if err != nil || !d.Allowed || d.Origin != limiter.OriginLocalFallback {
			t.Fatalf("call %d with a 20 ms deadline, the store's answer 50 ms away: %+v, %v; want allowed by the local fallback", i, d, err)
		}
	}
	if st, reason := fo.State(); st != failover.Closed {
		t.Errorf("breaker %s (%s) after calls that ran out of their callers' time, want closed: Redis was healthy", st, reason)
	}
}
