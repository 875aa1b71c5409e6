package algorithm

import "math"

// Token bucket: capacity burst (default limit), refilled lazily at limit per
// window; a new bucket starts full. A call of cost n takes n tokens or none.
//
// State: T = F, the instant the bucket is full again, in whole nanoseconds
// since the Unix epoch (0 = a new bucket). This is the theoretical-arrival
// (GCRA) form of a token bucket and says exactly what the contract's
// (tokens, last refill) says: with x = window/limit, the time one token
// takes to refill,
//
//	tokens(now) = capacity − max(0, F − now)/x
//
// so the whole state is one integer (which Redis keeps inside its object:
// see docs/redis.md). A decision works on the debt d = max(0, F − now), in
// ns, which a bucket may hold up to tol = capacity·x (an empty bucket):
//
//	a call of cost n passes  ⇔  d + n·x ≤ tol;  then F' = now + floor(d + n·x)
//
// The new debt is rounded DOWN to a whole nanosecond, so that a full bucket
// admits exactly capacity unit calls even when x is not a whole number of ns
// (3 a second: 333,333,333.3 ns): each allowed call is charged up to 1 ns
// less than its exact cost, in the caller's favour. Over n calls that is at
// most n ns of extra refill — a thousandth of the rule's rate for a bucket
// that sees a million calls a second; a call worth less than 1 ns (a rule
// faster than a billion a second) costs nothing.
//
// An edited rule reads the same debt at its own rate. A debt above tol — the
// rule was edited to a smaller burst or a higher rate, or the clock went
// backwards — is clamped to tol (rounded down to a whole ns) and the clamped
// state written, so a raised limit takes effect at once and a skewed clock
// costs at most one full refill. Otherwise only an allowed call writes state.
//
// tol is capped at tbMaxDebt (2^62 ns, 146 years), so that F stays an int64
// and a double holds it to the µs in Lua: a rule whose full refill would take
// longer (burst 1000 at one a year) behaves as if its burst were 146 years of
// refill, never more, and a call costing more than that is denied as
// cost_exceeds_capacity.
//
// All floating-point steps are written as in take.lua, operation for
// operation; times outside F are whole µs.

// tbMaxDebt is the largest debt a token bucket holds: 2^62 ns.
const tbMaxDebt = float64(1 << 62)

// tbCost is the debt in ns that n tokens are: n·window·1000/limit.
// Lua: n * window * 1000 / limit.
func tbCost(p Params, n int64) float64 {
	return float64(float64(float64(n)*float64(p.Window))*1000) / float64(p.Limit)
}

// tbTolerance is the debt of an empty bucket: capacity·window·1000/limit,
// at most tbMaxDebt.
func tbTolerance(p Params) float64 {
	tol := tbCost(p, p.Capacity())
	if tol > tbMaxDebt {
		tol = tbMaxDebt
	}
	return tol
}

// tbDebt is the debt in ns at now of the stored state s, computed from s
// alone so that a later evaluation of the same state reproduces it exactly;
// clamped reports a debt above tol, returned as floor(tol).
// Lua: (Fus - now) * 1000 + Fns, from the stored µs and ns parts.
func tbDebt(s State, now int64, tol float64) (d float64, clamped bool) {
	if s.T == 0 {
		return 0, false
	}
	d = float64(float64(s.T/1000-now)*1000) + float64(s.T%1000)
	if d < 0 {
		return 0, false
	}
	if d > tol {
		return math.Floor(tol), true
	}
	return d, false
}

// tbState is the state whose debt at now is d, a whole number of ns ≥ 0:
// F = now·1000 + d, with d split into µs and ns by the same float steps as
// Lua, which keeps F as those two parts.
func tbState(now int64, d float64) State {
	q := math.Floor(d / 1000)
	r := float64(d - float64(q*1000))
	for r < 0 {
		r, q = r+1000, q-1
	}
	for r >= 1000 {
		r, q = r-1000, q+1
	}
	return State{T: (now+int64(q))*1000 + int64(r)}
}

// tbRemaining is the largest cost r ≤ capacity that a single call could
// take at debt d: d + r·x ≤ tol. Unit calls, each rounded down, pass at
// least that many.
func tbRemaining(p Params, d, tol float64, capacity int64) int64 {
	r := floorI(float64(tol-d) / tbCost(p, 1))
	if r < 0 {
		r = 0
	}
	if r > capacity {
		r = capacity
	}
	for r > 0 && d+tbCost(p, r) > tol {
		r--
	}
	for r < capacity && d+tbCost(p, r+1) <= tol {
		r++
	}
	return r
}

func tokenBucket(p Params, s State, now, cost int64) (Result, State) {
	capacity := p.Capacity()
	tol := tbTolerance(p)
	d, clamped := tbDebt(s, now, tol)

	// The state a denied call leaves behind: unchanged unless clamped.
	base := s
	if clamped {
		base = tbState(now, d)
	}

	inc := tbCost(p, cost)
	if cost > capacity || inc > tol {
		return Result{
			Reason:     ReasonCostExceedsCapacity,
			Remaining:  tbRemaining(p, d, tol, capacity),
			ResetAfter: ceilF(d / 1000),
			Changed:    clamped,
		}, base
	}
	if d+inc <= tol {
		next := math.Floor(d + inc)
		return Result{
			Allowed:    true,
			Remaining:  tbRemaining(p, next, tol, capacity),
			ResetAfter: ceilF(next / 1000),
			Changed:    true,
		}, tbState(now, next)
	}

	// Denied: the first instant t at which the stored state passes the call,
	// d(t) + inc ≤ tol. Estimate, then step past any rounding, both ways, so
	// that the very evaluation a retry will run agrees: the answer is the
	// exact first passing microsecond.
	passes := func(t int64) bool {
		dt, _ := tbDebt(base, t, tol)
		return dt+inc <= tol
	}
	t := now + ceilF((d+inc-tol)/1000)
	if t <= now {
		t = now + 1
	}
	for !passes(t) {
		t++
	}
	for t > now+1 && passes(t-1) {
		t--
	}
	return Result{
		Reason:     ReasonLimited,
		Remaining:  tbRemaining(p, d, tol, capacity),
		ResetAfter: ceilF(d / 1000),
		RetryAfter: t - now,
		Changed:    clamped,
	}, base
}
