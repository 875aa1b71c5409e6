package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/algorithm/conformance"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/limiter"
)

// scriptMicros is the mean time Redis spent in one EVALSHA since the last
// CONFIG RESETSTAT (INFO commandstats usec_per_call): the script's own cost,
// without the round trip.
func scriptMicros(b *testing.B, srv *redistest.Server) float64 {
	for _, line := range strings.Split(do(b, srv, "info", "commandstats"), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:"); ok {
			for _, f := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
					x, _ := strconv.ParseFloat(v, 64)
					return x
				}
			}
		}
	}
	return 0
}

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
			do(b, srv, "config", "resetstat")
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				now += 7 * conformance.Millisecond
				clock.Store(now)
				if _, err := s.Take(context.Background(), ops, res); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(scriptMicros(b, srv), "redis-µs/call")
		})
	}
}
