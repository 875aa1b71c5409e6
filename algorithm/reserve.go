package algorithm

import (
	"errors"
	"fmt"
	"math"
)

// Reservations: a caller that is willing to wait asks for the first instant
// its call may pass instead of a yes or no for now. Only the two buckets
// answer that: they store one instant (the token bucket's full-again F, the
// leaky bucket's TAT), and a call admitted at a later instant t is simply
// Apply at t. A reservation granted for t writes the state Apply writes at
// t, so the next one queues behind it: successive reservations get
// successive slots at the rule's rate, and the calls sent at their slots
// are exactly the calls the bucket would have admitted had they arrived
// then.
//
// The window algorithms count calls per window: a call taken now but sent
// in a later window would be counted in the wrong one, so they do not
// reserve (ErrReserveKind).
//
// A state with reservations outstanding holds more debt than an empty
// bucket, at most maxQueue more (a reservation waits at most an hour), and
// Apply owes it as it is: a check (denied, until the queue has passed)
// never erases it. FirstAllowed starts where the stored debt is back
// within an empty bucket's.

// maxQueue is the most debt beyond an empty bucket's that the bucket
// algorithms owe as it is (µs): the reservations handed out ahead, which
// wait at most an hour. Debt further beyond can only come from a clock
// that went backwards, and is clamped to an empty bucket.
const maxQueue = 3600 * 1_000_000

// ErrReserveKind: the algorithm cannot reserve (it is not a bucket).
var ErrReserveKind = errors.New("algorithm: only token_bucket and leaky_bucket rules can reserve")

// CanReserve reports whether rules of kind k can reserve.
func CanReserve(k Kind) bool { return k == TokenBucket || k == LeakyBucket }

// FirstAllowed returns the first instant t ≥ now (µs) at which Apply(p, s,
// t, cost) allows the call; Apply at any later instant allows it too. ok is
// false when the call can never pass (cost above capacity); err is
// ErrReserveKind (wrapped, naming the algorithm) for a window algorithm.
func FirstAllowed(p Params, s State, now, cost int64) (t int64, ok bool, err error) {
	if !CanReserve(p.Kind) {
		return 0, false, fmt.Errorf("%w, not %s", ErrReserveKind, p.Kind)
	}
	if cost > p.Capacity() {
		return 0, false, nil
	}
	t = now
	// Skip the stretch in which the stored debt exceeds an empty bucket's
	// (outstanding reservations): Apply denies there (or, past maxQueue,
	// clamps).
	if idle := Idle(p, s, now); idle > 0 {
		if c := now + idle - emptyDebt(p); c > t {
			t = c
		}
	}
	for range 64 {
		r, _ := Apply(p, s, t, cost)
		if r.Allowed {
			// Step back over any rounding in the skip above.
			for range 16 {
				if t <= now {
					break
				}
				if r, _ := Apply(p, s, t-1, cost); !r.Allowed {
					break
				}
				t--
			}
			return t, true, nil
		}
		if r.Reason == ReasonCostExceedsCapacity {
			return 0, false, nil
		}
		t += max(r.RetryAfter, 1)
	}
	// Not reached for a valid rule: each step above lands on the first
	// passing instant of a debt no larger than the true one.
	return 0, false, fmt.Errorf("algorithm: FirstAllowed(%s, cost %d) did not converge", p.Kind, cost)
}

// emptyDebt is the debt of an empty bucket in whole µs, rounded down.
func emptyDebt(p Params) int64 {
	var d float64
	switch p.Kind {
	case TokenBucket:
		d = float64(p.Capacity()) * float64(p.Window) / float64(p.Limit)
	case LeakyBucket:
		d = float64(p.Capacity()) * float64(p.interval())
	}
	if d >= 1<<62 {
		return 1 << 62
	}
	return int64(math.Floor(d))
}
