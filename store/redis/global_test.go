package redis_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// TestGlobalBudget: three limiters (three sluice instances), each with its
// own connection to one Redis, share a global rule of 1,000 an hour; 200
// callers with 200 identities make 2,000 calls at once and exactly 1,000
// pass. Each caller also has its own rule of 8 an hour, so calls take from
// two buckets (on a cluster two shards, with the give-back when one
// denies): no caller passes more than 8, and a call the global budget
// denied took nothing from its caller's bucket.
func TestGlobalBudget(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		srv := redistest.Start(t)
		globalBudget(t, []string{srv.Addr()})
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t, 3, 0)
		globalBudget(t, c.Addrs())
	})
}

func globalBudget(t *testing.T, addrs []string) {
	const (
		callers  = 200
		calls    = 10
		budget   = 1000
		perUser  = 8
		fixedNow = int64(1_700_006_400_000_000)
	)
	ix := limitertest.Compile(t, &rules.Set{Rules: []rules.Rule{
		{ID: "budget", By: rules.ByGlobal, Limit: budget, Window: rules.Duration(time.Hour)},
		{ID: "per-user", By: rules.ByUser, Limit: perUser, Window: rules.Duration(time.Hour)},
	}})
	var ls [3]*limiter.Limiter
	for i := range ls {
		// One instant for the whole run: a token bucket refilling 1,000 an
		// hour would otherwise add one every 3.6 s of a slow run.
		st := openStore(t, func(c *sredis.Config) { c.Clock = func() int64 { return fixedNow } }, addrs...)
		ls[i] = limiter.New(st, limiter.Config{})
		ls[i].SetRules(ix)
	}
	var allowed atomic.Int64
	var perCaller [callers]int64
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make(chan error, callers)
	for c := range callers {
		wg.Go(func() {
			l := ls[c%len(ls)]
			req := limiter.Request{User: fmt.Sprintf("caller-%03d", c), Method: "GET", Path: "/search"}
			for range calls {
				d, err := l.Check(ctx, &req)
				if err != nil {
					errs <- err
					return
				}
				if d.Allowed {
					allowed.Add(1)
					perCaller[c]++
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Check: %v", err)
	}
	if got := allowed.Load(); got != budget {
		t.Errorf("%d calls allowed under a global budget of %d, want exactly %d", got, budget, budget)
	}
	// What each caller's bucket holds is what it was allowed: one more call
	// per caller passes while the caller had taken fewer than perUser.
	for c := range callers {
		if perCaller[c] > perUser {
			t.Errorf("caller %d: %d allowed, want at most %d", c, perCaller[c], perUser)
		}
	}
	// Exhausted global budget: every caller is now denied by it, whatever
	// its own bucket; a caller's own remaining is perUser − its allowed.
	for c := range callers {
		req := limiter.Request{User: fmt.Sprintf("caller-%03d", c)}
		d, err := ls[0].Check(ctx, &req)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed || d.RuleID() != "budget" && perCaller[c] < perUser {
			t.Fatalf("caller %d after the run: allowed %v by rule %q, want denied by budget", c, d.Allowed, d.RuleID())
		}
	}
	// Without the budget, each caller's own bucket shows that only its
	// allowed calls took from it: the denied ones were given back.
	ls[1].SetRules(limitertest.Compile(t, &rules.Set{Rules: ix.Set().Rules[1:]}))
	for c := range callers {
		req := limiter.Request{User: fmt.Sprintf("caller-%03d", c)}
		d, err := ls[1].Check(ctx, &req)
		if err != nil {
			t.Fatal(err)
		}
		want := perUser - perCaller[c] - 1
		if perCaller[c] == perUser {
			want = 0
		}
		if d.Allowed != (perCaller[c] < perUser) || d.Remaining != want {
			t.Errorf("caller %d (%d allowed before): own bucket allowed %v, remaining %d; want %v, %d",
				c, perCaller[c], d.Allowed, d.Remaining, perCaller[c] < perUser, want)
		}
	}
}

// BenchmarkGlobalKey: decisions of one global rule (one hot key) against
// one per-user rule (a key per caller), on one Redis. It reports the Redis
// CPU each decision costs inside the server (INFO commandstats, the
// scripts' usec): a global rule's decisions all land on the shard of its
// one key, so that shard's CPU bounds the rule.
func BenchmarkGlobalKey(b *testing.B) {
	for _, by := range []rules.By{rules.ByGlobal, rules.ByUser} {
		b.Run("by="+string(by), func(b *testing.B) {
			srv := redistest.Start(b)
			l := limitertest.Over(b, openStore(b, nil, srv.Addr()), &rules.Set{Rules: []rules.Rule{
				{ID: "r", By: by, Limit: algorithm.MaxLimit, Window: rules.Duration(time.Hour)},
			}})
			var n atomic.Int64
			before := scriptUsec(b, srv)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				i := n.Add(1_000_000)
				for pb.Next() {
					i++
					req := limiter.Request{User: fmt.Sprintf("u%d", i%100_000)}
					if _, err := l.Check(ctx, &req); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(scriptUsec(b, srv)-before)/float64(b.N), "redis-µs/decision")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}
