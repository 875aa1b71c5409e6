package algorithm

import (
	"math/big"
	"math/rand/v2"
	"testing"
)

// TestTokenTimes: token.times, which divides only when it must, is m·window
// = q·limit + r exactly, checked against math/big over the whole range the
// rules allow (limits and costs ≤ 10^9, windows ≤ 366 days) and its edges.
func TestTokenTimes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const maxWindow = 366 * 24 * 3600 * 1_000_000
	check := func(m, w, l int64) {
		q, r := tokenOf(Params{Window: w, Limit: l}).times(m)
		prod := new(big.Int).Mul(big.NewInt(m), big.NewInt(w))
		wq, wr := new(big.Int).QuoRem(prod, big.NewInt(l), new(big.Int))
		if q != wq.Int64() || r != wr.Int64() {
			t.Fatalf("times(%d) for %d µs / %d = (%d, %d), want (%s, %s)", m, w, l, q, r, wq, wr)
		}
		if mq, mr := mulDiv(m, w, l); mq != q || mr != r {
			t.Fatalf("mulDiv(%d, %d, %d) = (%d, %d), times gives (%d, %d)", m, w, l, mq, mr, q, r)
		}
	}
	edges := []int64{1, 2, 3, 7, 999_999_999, 1_000_000_000}
	for _, m := range edges {
		for _, l := range edges {
			for _, w := range []int64{1, 3, 1_000, 1_000_000, 3_600_000_000, maxWindow} {
				check(m, w, l)
			}
		}
	}
	for range 200_000 {
		check(1+rng.Int64N(1_000_000_000), 1+rng.Int64N(maxWindow), 1+rng.Int64N(1_000_000_000))
	}
}
