package algorithm_test

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/testkit/conformance"
)

// TestRetryAfterIsExact checks every denial's RetryAfter against what the
// algorithm itself then does: the same call at now+RetryAfter passes, and
// one microsecond earlier it does not. A retry is never earlier than the
// moment the call could pass, and not later either.
func TestRetryAfterIsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, k := range algorithm.Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			denials := 0
			for iter := 0; iter < 300; iter++ {
				p := conformance.RandomParams(r, k)
				var s algorithm.State
				now := conformance.Base + r.Int64N(conformance.Day)
				for step := 0; step < 40; step++ {
					now += r.Int64N(p.Window/4 + 1)
					if r.IntN(20) == 0 {
						now -= r.Int64N(p.Window + 1) // the clock jumps back
					}
					cost := 1 + r.Int64N(p.Capacity())
					res, ns := algorithm.Apply(p, s, now, cost)
					if res.Changed {
						s = ns
					}
					if res.Allowed || res.Reason != algorithm.ReasonLimited {
						continue
					}
					denials++
					if res.RetryAfter <= 0 {
						t.Fatalf("%+v: denied at %d with RetryAfter %d, want > 0", p, now, res.RetryAfter)
					}
					at := now + res.RetryAfter
					if got, _ := algorithm.Apply(p, clone(s), at, cost); !got.Allowed {
						t.Fatalf("%+v state %+v: denied at %d cost %d with RetryAfter %d, but still denied then: %+v",
							p, s, now, cost, res.RetryAfter, got)
					}
					if res.RetryAfter > 1 {
						if got, _ := algorithm.Apply(p, clone(s), at-1, cost); got.Allowed {
							t.Fatalf("%+v state %+v: denied at %d cost %d with RetryAfter %d, but allowed 1µs earlier",
								p, s, now, cost, res.RetryAfter)
						}
					}
				}
			}
			if denials < 100 {
				t.Fatalf("only %d denials exercised", denials)
			}
		})
	}
}

func clone(s algorithm.State) algorithm.State {
	s.Log = append([]int64(nil), s.Log...)
	return s
}

// TestNeverOverAdmits replays random traffic and checks the guarantees each
// algorithm makes: sliding_log never admits more than limit in any window;
// fixed_window never more than limit per aligned window; token_bucket never
// more than burst + elapsed·rate.
func TestNeverOverAdmits(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for iter := 0; iter < 200; iter++ {
		for _, k := range []algorithm.Kind{algorithm.TokenBucket, algorithm.FixedWindow, algorithm.SlidingLog} {
			p := algorithm.Params{Kind: k, Limit: int64(1 + r.IntN(20)), Window: int64(1+r.IntN(1000)) * conformance.Millisecond}
			var s algorithm.State
			start := conformance.Base
			now := start
			var admitted []int64
			for step := 0; step < 300; step++ {
				now += r.Int64N(p.Window / 5)
				res, ns := algorithm.Apply(p, s, now, 1)
				if res.Changed {
					s = ns
				}
				if res.Allowed {
					admitted = append(admitted, now)
				}
			}
			switch k {
			case algorithm.SlidingLog, algorithm.FixedWindow:
				wantWindowsWithin(t, p, admitted)
			case algorithm.TokenBucket:
				for i, a := range admitted {
					bound := float64(p.Capacity()) + float64(a-start)*float64(p.Limit)/float64(p.Window)
					if float64(i+1) > bound+1e-9 {
						t.Fatalf("%+v: %d calls admitted by %d, want ≤ %.3f", p, i+1, a-start, bound)
					}
				}
			}
		}
	}
}

// wantWindowsWithin checks the guarantee of a window algorithm over the
// instants of the admitted units: sliding_log admits at most p.Limit in
// any window, fixed_window at most p.Limit per aligned window.
func wantWindowsWithin(t *testing.T, p algorithm.Params, admitted []int64) {
	t.Helper()
	switch p.Kind {
	case algorithm.SlidingLog:
		for i := range admitted {
			n := 0
			for j := i; j < len(admitted) && admitted[j] < admitted[i]+p.Window; j++ {
				n++
			}
			if int64(n) > p.Limit {
				t.Fatalf("%+v: %d calls admitted in one window from %d, want ≤ %d", p, n, admitted[i], p.Limit)
			}
		}
	case algorithm.FixedWindow:
		per := map[int64]int64{}
		for _, a := range admitted {
			per[a-a%p.Window]++
		}
		for w, n := range per {
			if n > p.Limit {
				t.Fatalf("%+v: %d calls in window %d, want ≤ %d", p, n, w, p.Limit)
			}
		}
	default:
		t.Fatalf("wantWindowsWithin: %v is not a window algorithm", p.Kind)
	}
}

// TestTokenBucketRemaining checks that a token bucket's Remaining is what
// its decision rule then admits: a call of cost Remaining passes right
// after, one of Remaining+1 does not, and Remaining unit calls in a row
// pass.
func TestTokenBucketRemaining(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	checked := 0
	for iter := 0; iter < 300; iter++ {
		p := conformance.RandomParams(r, algorithm.TokenBucket)
		var s algorithm.State
		now := conformance.Base + r.Int64N(conformance.Day)
		for step := 0; step < 40; step++ {
			now += r.Int64N(p.Window/4 + 1)
			if r.IntN(20) == 0 {
				now -= r.Int64N(p.Window + 1)
			}
			if r.IntN(20) == 0 {
				p = conformance.RandomParams(r, algorithm.TokenBucket) // the rule is edited
			}
			res, ns := algorithm.Apply(p, s, now, 1+r.Int64N(p.Capacity()))
			if res.Changed {
				s = ns
			}
			left := res.Remaining
			if left > 0 {
				if got, _ := algorithm.Apply(p, s, now, left); !got.Allowed {
					t.Fatalf("%+v state %+v at %d: Remaining %d, but a call of cost %d is denied: %+v", p, s, now, left, left, got)
				}
			}
			if left < p.Capacity() {
				if got, _ := algorithm.Apply(p, s, now, left+1); got.Allowed {
					t.Fatalf("%+v state %+v at %d: Remaining %d, but a call of cost %d passes", p, s, now, left, left+1)
				}
			}
			if left <= 1000 {
				u := s
				for i := int64(0); i < left; i++ {
					got, nu := algorithm.Apply(p, u, now, 1)
					if !got.Allowed {
						t.Fatalf("%+v state %+v at %d: Remaining %d, but unit call %d is denied", p, s, now, left, i+1)
					}
					u = nu
				}
			}
			checked++
		}
	}
	t.Logf("%d decisions checked", checked)
}

// extremeInstant is an instant in µs from 1970 to the last one an int64 of
// ns can name (2262-04-11).
func extremeInstant(r *rand.Rand) int64 {
	const last = math.MaxInt64 / 1000
	switch r.IntN(4) {
	case 0:
		return 1 + r.Int64N(1000*conformance.Day)
	case 1:
		return last - r.Int64N(1000*conformance.Day)
	}
	return 1 + r.Int64N(last)
}

// TestExtremesNeverOverAdmit replays random traffic on rules from the whole
// accepted range at instants from 1970 to 2262 and checks that no call is
// admitted beyond what the rule allows, in exact arithmetic: a token bucket
// at most capacity + elapsed·limit/window, a leaky bucket burst+1 +
// elapsed/interval, a fixed window limit per window, a sliding log limit in
// any window; and that a full token bucket admits exactly its capacity.
func TestExtremesNeverOverAdmit(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for iter := 0; iter < 400; iter++ {
		for _, k := range []algorithm.Kind{algorithm.TokenBucket, algorithm.LeakyBucket, algorithm.FixedWindow, algorithm.SlidingLog} {
			p := conformance.ExtremeParams(r, k)
			start := extremeInstant(r)
			if start > math.MaxInt64/1000-p.Window*4 {
				start = math.MaxInt64/1000 - p.Window*4
			}
			capacity := p.Capacity()
			var s algorithm.State
			if k == algorithm.TokenBucket {
				// a full bucket: any split of its capacity passes, then nothing
				left := capacity
				for left > 0 {
					c := 1 + r.Int64N(left)
					if res, ns := algorithm.Apply(p, s, start, c); !res.Allowed {
						t.Fatalf("%+v at %d: full bucket denied cost %d with %d of %d left: %+v", p, start, c, left, capacity, res)
					} else {
						s = ns
					}
					left -= c
				}
				if res, _ := algorithm.Apply(p, s, start, 1); res.Allowed || res.Remaining != 0 {
					t.Fatalf("%+v at %d: a call past the capacity: %+v", p, start, res)
				}
				s = algorithm.State{}
			}
			now := start
			var admitted []int64 // one entry per unit, up to 1000 per call
			var n int64          // units admitted
			for step := 0; step < 80 && now < math.MaxInt64/1000-p.Window; step++ {
				now += r.Int64N(p.Window/int64(1+r.IntN(4)) + 1)
				if now > math.MaxInt64/1000 {
					now = math.MaxInt64 / 1000
				}
				cost := 1 + r.Int64N(min(capacity, 1+r.Int64N(5)*capacity/4))
				res, ns := algorithm.Apply(p, s, now, cost)
				if res.Changed {
					s = ns
				}
				if !res.Allowed {
					continue
				}
				for range min(cost, 1000) {
					admitted = append(admitted, now)
				}
				n += cost
				elapsed := big.NewRat(now-start, 1)
				switch k {
				case algorithm.TokenBucket:
					bound := new(big.Rat).Mul(elapsed, big.NewRat(p.Limit, p.Window))
					bound.Add(bound, big.NewRat(capacity, 1))
					if big.NewRat(n, 1).Cmp(bound) > 0 {
						t.Fatalf("%+v from %d: %d admitted by +%dµs, at most %s", p, start, n, now-start, bound.FloatString(3))
					}
				case algorithm.LeakyBucket:
					interval := (p.Window + p.Limit - 1) / p.Limit // ceil(window/limit)
					if bound := capacity + (now-start)/interval; n > bound {
						t.Fatalf("%+v from %d: %d admitted by +%dµs, at most %d", p, start, n, now-start, bound)
					}
				}
			}
			if k == algorithm.FixedWindow || k == algorithm.SlidingLog {
				wantWindowsWithin(t, p, admitted)
			}
		}
	}
}

// TestTakeLowersRemainingByCost: a call of cost c that is allowed (and not
// a charge) leaves a Remaining exactly c below what a call of cost 0 reads
// of the same bucket at the same instant. limiter.CheckMany relies on it
// to report, for a denied call that took nothing, what each bucket that
// would have allowed holds (its Remaining plus its cost); take.lua answers
// as these functions do (store/redis's differential test).
func TestTakeLowersRemainingByCost(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 8))
	for _, k := range algorithm.Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			checked := 0
			for iter := 0; iter < 400; iter++ {
				p := conformance.RandomParams(r, k)
				if iter%4 == 3 {
					p = conformance.ExtremeParams(r, k)
				}
				var s algorithm.State
				now := conformance.Base + r.Int64N(conformance.Day)
				for step := 0; step < 40; step++ {
					now += r.Int64N(p.Window/4 + 1)
					if r.IntN(20) == 0 {
						now -= r.Int64N(p.Window + 1) // the clock jumps back
					}
					cost := 1 + r.Int64N(min(p.Capacity(), 1<<29))
					if cost > 50 && k == algorithm.SlidingLog {
						cost = 1 + r.Int64N(5)
					}
					read, _ := algorithm.Apply(p, s, now, 0)
					res, ns := algorithm.Apply(p, s, now, cost)
					if res.Allowed {
						checked++
						if res.Remaining+cost != read.Remaining {
							t.Fatalf("%+v at %d: a call of cost %d leaves %d remaining, a read %d; want %d", p, now, cost, res.Remaining, read.Remaining, read.Remaining-cost)
						}
					}
					if res.Changed {
						s = ns
					}
				}
			}
			if checked < 1000 {
				t.Fatalf("only %d allowed calls checked", checked)
			}
		})
	}
}
