package algorithm_test

import (
	"testing"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/testkit/conformance"
)

// BenchmarkApply measures one decision of each algorithm on a warm bucket,
// advancing the clock so calls keep alternating between allowed and denied.
func BenchmarkApply(b *testing.B) {
	for _, k := range algorithm.Kinds() {
		b.Run(k.String(), func(b *testing.B) {
			p := algorithm.Params{Kind: k, Limit: 100, Window: conformance.Second}
			var s algorithm.State
			s.Log = make([]int64, 0, 128)
			now := conformance.Base
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				now += 7 * conformance.Millisecond
				res, ns := algorithm.Apply(p, s, now, 1)
				if res.Changed {
					s = ns
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}
