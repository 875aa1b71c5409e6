package failover_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store/failover"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// BenchmarkTake: what the failover layer adds to a decision on a healthy
// Redis (its deadlines, the overdue timer, the breaker's bookkeeping), side
// by side with the Redis store alone; parallel callers, a new bucket per
// call so that every call is a script run.
func BenchmarkTake(b *testing.B) {
	srv := redistest.Start(b)
	cfg := sredis.DefaultConfig()
	cfg.Addrs = []string{srv.Addr()}
	direct, err := sredis.New(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer direct.Close()
	fo := failover.New(func(ctx context.Context) (failover.Primary, error) { return sredis.New(ctx, cfg) },
		failover.Config{Instances: 1})
	defer fo.Close()
	for _, st := range []struct {
		name  string
		store limiter.Store
	}{{"redis", direct}, {"failover", fo}} {
		b.Run(st.name, func(b *testing.B) {
			var n atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				res := make([]algorithm.Result, 1)
				ops := []limiter.Op{{Rule: "r", Params: algorithm.Params{Kind: algorithm.TokenBucket, Limit: 100, Window: 60_000_000}, Cost: 1}}
				for pb.Next() {
					ops[0].Client = fmt.Sprint("user:", n.Add(1))
					if _, err := st.store.Take(context.Background(), ops, res); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}
