package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
)

// BenchmarkGlobalKey: decisions of one global rule (one hot key) against
// one per-user rule (a key per caller), on one Redis. It reports the Redis
// CPU each decision costs inside the server (INFO commandstats, the
// scripts' usec): a global rule's decisions all land on the shard of its
// one key, so that shard's CPU bounds the rule.
func BenchmarkGlobalKey(b *testing.B) {
	for _, by := range []rules.By{rules.ByGlobal, rules.ByUser} {
		b.Run("by="+string(by), func(b *testing.B) {
			srv := redistest.Start(b)
			ix, err := rules.Compile(&rules.Set{Rules: []rules.Rule{
				{ID: "r", By: by, Limit: rules.MaxLimit, Window: rules.Duration(time.Hour)},
			}})
			if err != nil {
				b.Fatal(err)
			}
			l := limiter.New(openStore(b, nil, srv.Addr()), limiter.Config{})
			l.SetRules(ix)
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

// scriptUsec is the usec Redis spent in scripts and functions so far.
func scriptUsec(t testing.TB, srv *redistest.Server) int64 {
	var sum int64
	for _, line := range strings.Split(do(t, srv, "info", "commandstats"), "\n") {
		line = strings.TrimSpace(line)
		for _, c := range []string{"evalsha", "eval", "fcall"} {
			if rest, ok := strings.CutPrefix(line, "cmdstat_"+c+":"); ok {
				for _, f := range strings.Split(rest, ",") {
					if v, ok := strings.CutPrefix(f, "usec="); ok {
						n, _ := strconv.ParseInt(v, 10, 64)
						sum += n
					}
				}
			}
		}
	}
	return sum
}
