package conformance

import (
	"math/rand/v2"

	"github.com/sluicehq/sluice/algorithm"
)

// RandomParams draws a rule of kind k from small to extreme (windows 1 ms …
// 366 d, limits 1 … 10^9, a sliding log at most 50, a bucket's burst
// 1 … 20 half the time), so that the float steps meet awkward fractions.
func RandomParams(r *rand.Rand, k algorithm.Kind) algorithm.Params {
	windows := []int64{Millisecond, 7 * Millisecond, Second, 3 * Second, Minute, Hour, Day, 366 * Day}
	limits := []int64{1, 2, 3, 7, 10, 100, 997, 10000, 1_000_000, 1_000_000_000}
	p := algorithm.Params{Kind: k, Window: windows[r.IntN(len(windows))], Limit: limits[r.IntN(len(limits))]}
	if k == algorithm.SlidingLog && p.Limit > 50 {
		p.Limit = int64(1 + r.IntN(50))
	}
	if (k == algorithm.TokenBucket || k == algorithm.LeakyBucket) && r.IntN(2) == 0 {
		p.Burst = int64(1 + r.IntN(20))
	}
	return p
}

// ExtremeParams draws a valid rule of kind k from the whole accepted range
// (limits 1 … 10^9, windows 1 ms … 366 d, bursts up to 10^9), redrawn until
// algorithm.Params.Check accepts it.
func ExtremeParams(r *rand.Rand, k algorithm.Kind) algorithm.Params {
	pick := func(xs ...int64) int64 { return xs[r.IntN(len(xs))] }
	for {
		p := algorithm.Params{Kind: k,
			Limit:  pick(1, 2, 3, 7, 9, 997, 10000, 999_999_937, 1_000_000_000, 1+r.Int64N(1_000_000_000)),
			Window: pick(algorithm.MinWindow, 7*Millisecond, 3810*Millisecond, Day, algorithm.MaxWindow, algorithm.MinWindow+r.Int64N(algorithm.MaxWindow)),
		}
		if k == algorithm.SlidingLog {
			p.Limit = 1 + p.Limit%algorithm.MaxLogLimit
		}
		if k == algorithm.TokenBucket || k == algorithm.LeakyBucket {
			p.Burst = pick(0, 1, 39, 40, 1000, 300_000, 1_000_000_000, r.Int64N(1_000_000_000))
		}
		if f, _ := p.Check(); f == "" {
			return p
		}
	}
}
