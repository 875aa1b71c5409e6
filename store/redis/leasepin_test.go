package redis_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/limiter"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// TestLeasePinnedCaller: a per-caller rule pinned lease: on (100 per 10 s,
// as bench/leases.sh's) decided for callers at paced rates, on one
// instance and alternating across three: admitted never exceeds the
// bucket in any interval; the log says what share of a perfect bucket's
// admissions of the same calls it reached.
func TestLeasePinnedCaller(t *testing.T) {
	srv := redistest.Start(t)
	for _, ttl := range []time.Duration{200 * time.Millisecond, time.Second} {
		stores := make([]*sredis.Store, 3)
		for i := range stores {
			stores[i] = openStore(t, func(c *sredis.Config) { c.LeaseTTL = ttl }, srv.Addr())
		}
		for _, tc := range []struct {
			name      string
			instances int
			rate      float64 // calls a second
		}{
			{"light, 2/s, one instance", 1, 2},
			{"medium, 8/s, one instance", 1, 8},
			{"heavy, 40/s, one instance", 1, 40},
			{"medium, 8/s, alternating over 3", 3, 8},
			{"heavy, 40/s, alternating over 3", 3, 40},
		} {
			client := tc.name + ttl.String()
			op := limiter.Op{Client: client, Rule: "per-caller", Cost: 1, Lease: limiter.LeaseOn,
				Params: algorithm.Params{Kind: algorithm.TokenBucket, Limit: 100, Window: 10e6}}
			d := 6 * time.Second
			start := time.Now()
			var tried, admitted []time.Duration
			res := make([]algorithm.Result, 1)
			for k := 0; ; k++ {
				at := start.Add(time.Duration(float64(k) / tc.rate * float64(time.Second)))
				if at.After(start.Add(d)) {
					break
				}
				time.Sleep(time.Until(at))
				b := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, err := stores[k%tc.instances].Take(ctx, []limiter.Op{op}, res)
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				tried = append(tried, b.Sub(start))
				if res[0].Allowed {
					admitted = append(admitted, time.Since(start))
				}
			}
			best := ideal(slices.Clone(tried), 100, 10)
			ex := excess(slices.Clone(admitted), 100, 10)
			var calls int64
			for _, s := range stores[:tc.instances] {
				calls += s.Leases().Calls
			}
			t.Logf("lease ttl %s, %s: %d calls, %d admitted, a perfect bucket %d (%.1f %%); worst interval %.1f over the bucket; lease calls so far %d",
				ttl, tc.name, len(tried), len(admitted), best, 100*float64(len(admitted))/float64(best), ex, calls)
			if ex > 1 {
				t.Errorf("%s: an interval admitted %.1f more than the bucket allows", tc.name, ex)
			}
		}
	}
}
