package redis_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/algorithm/conformance"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/limiter"
)

// BenchmarkTake measures one decision through take.lua on a real
// redis-server, per algorithm, one call at a time (no batching), on a warm
// bucket of 100 calls a second that alternates between allowed and denied.
func BenchmarkTake(b *testing.B) {
	srv := redistest.Start(b)
	var clock atomic.Int64
	s := newStore(b, &clock, srv.Addr())
	for _, k := range algorithm.Kinds {
		b.Run(k.String(), func(b *testing.B) {
			ops := []limiter.Op{{Client: "user:bench", Rule: fmt.Sprint(k), Params: algorithm.Params{Kind: k, Limit: 100, Window: conformance.Second}, Cost: 1}}
			res := make([]algorithm.Result, 1)
			now := conformance.Base
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				now += 7 * conformance.Millisecond
				clock.Store(now)
				if _, err := s.Take(context.Background(), ops, res); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
