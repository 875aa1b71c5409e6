package algorithm_test

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/testkit/conformance"
)

// exactTokens is the token bucket's tokens at now from its state, as an
// exact rational: capacity − debt·limit/window.
func exactTokens(p algorithm.Params, s algorithm.State, now int64) *big.Rat {
	tok := new(big.Rat).SetInt64(p.Capacity())
	if s.T == 0 || s.T < now {
		return tok
	}
	// debt in 1/limit µs: (T − now)·limit + A
	debt := new(big.Int).Mul(big.NewInt(s.T-now), big.NewInt(p.Limit))
	debt.Add(debt, big.NewInt(int64(s.A)))
	return tok.Sub(tok, new(big.Rat).SetFrac(debt, big.NewInt(p.Window)))
}

// near reports whether x is within float64 rounding of n: where
// golang.org/x/time/rate, which counts tokens in a float64, may decide
// either way.
func near(x *big.Rat, n int64) bool {
	d, _ := new(big.Rat).Sub(x, new(big.Rat).SetInt64(n)).Float64()
	return math.Abs(d) <= 1e-6*math.Max(1, float64(n))
}

// TestTokenBucketMatchesXRate drives random sequences of (time, cost)
// through the token bucket and through golang.org/x/time/rate (the same
// rate, the same burst, the same instants, in whole µs) and requires the
// same decision and the same Remaining (x/time/rate's tokens rounded down).
// The only differences allowed are x/time/rate's float64 roundings: where
// the exact tokens (a rational, from the bucket's state) are within 10^-6
// of the boundary, x/time/rate may decide either way; sluice must then
// decide as exact arithmetic does. After such a difference the two buckets
// hold different states, so the sequence starts over.
func TestTokenBucketMatchesXRate(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 8))
	windows := []int64{conformance.Millisecond, 7 * conformance.Millisecond, conformance.Second,
		3810 * conformance.Millisecond, conformance.Minute, conformance.Hour, conformance.Day}
	limits := []int64{1, 2, 3, 7, 9, 10, 100, 997, 10000, 1_000_000}
	base := time.Unix(0, conformance.Base*1000)
	decisions, boundary := 0, 0
	for seq := 0; seq < 3000; seq++ {
		p := algorithm.Params{Kind: algorithm.TokenBucket, Window: windows[r.IntN(len(windows))], Limit: limits[r.IntN(len(limits))]}
		if r.IntN(2) == 0 {
			p.Burst = int64(1 + r.IntN(30))
		}
		if f, _ := p.Check(); f != "" {
			continue
		}
		lim := rate.NewLimiter(rate.Limit(float64(p.Limit)/(float64(p.Window)/1e6)), int(p.Capacity()))
		var s algorithm.State
		now := int64(0)
		for step := 0; step < 60; step++ {
			if r.IntN(3) > 0 {
				now += r.Int64N(p.Window/int64(1+r.IntN(int(p.Limit))) + 2)
			}
			cost := 1 + r.Int64N(p.Capacity())
			if r.IntN(4) == 0 {
				cost = 1
			}
			at := base.Add(time.Duration(now) * time.Microsecond)
			exact := exactTokens(p, s, conformance.Base+now)
			res, ns := algorithm.Apply(p, s, conformance.Base+now, cost)
			theirs := lim.AllowN(at, int(cost))
			decisions++
			if want := exact.Cmp(new(big.Rat).SetInt64(cost)) >= 0; res.Allowed != want {
				t.Fatalf("%+v at +%dµs cost %d: allowed %v, exact tokens %s", p, now, cost, res.Allowed, exact.FloatString(9))
			}
			if res.Allowed != theirs {
				if !near(exact, cost) {
					t.Fatalf("%+v at +%dµs cost %d: sluice allowed=%v, x/time/rate %v, exact tokens %s: not a rounding",
						p, now, cost, res.Allowed, theirs, exact.FloatString(9))
				}
				boundary++
				break
			}
			if res.Changed {
				s = ns
			}
			after := exactTokens(p, s, conformance.Base+now)
			tok := lim.TokensAt(at)
			if got := res.Remaining; got != int64(math.Floor(tok)) {
				fl := new(big.Int).Quo(after.Num(), after.Denom()).Int64() // exact tokens rounded down
				if got != fl {
					t.Fatalf("%+v at +%dµs cost %d: Remaining %d, exact tokens %s", p, now, cost, got, after.FloatString(9))
				}
				if !near(after, got+1) && !near(after, got) {
					t.Fatalf("%+v at +%dµs cost %d: Remaining %d, x/time/rate tokens %.9f, exact %s: not a rounding",
						p, now, cost, got, tok, after.FloatString(9))
				}
				boundary++
				break
			}
		}
	}
	if decisions < 50000 {
		t.Fatalf("only %d decisions compared", decisions)
	}
	t.Logf("%d decisions compared; %d sequences ended at a boundary where x/time/rate's float64 rounds", decisions, boundary)
}
