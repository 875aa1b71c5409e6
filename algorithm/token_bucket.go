package algorithm

// Token bucket: capacity burst (default limit), refilled lazily at limit per
// window; a new bucket starts full. A call of cost n takes n tokens or none.
//
// Exact. A token is window/limit µs of refill, a rational number: 3 a
// second is 333,333⅓ µs. The state is F, the instant the bucket is full
// again (the theoretical arrival time of the GCRA form of a token bucket),
// held as whole µs plus a remainder in units of 1/limit µs:
//
//	T = ⌊F⌋ in µs since the Unix epoch (0 = a new bucket)
//	A = r, 0 ≤ r < B, the part of F past T, in 1/B µs
//	B = the limit r is counted in (0 when r = 0)
//
// so that with debt d = max(0, F − now),
//
//	tokens(now) = capacity − d·limit/window
//
// and every step is integer arithmetic on (µs, remainder) pairs, the same in
// Go (int64) and in take.lua (doubles, every value below 2^53):
//
//	a call of cost n passes  ⇔  n ≤ capacity and d ≤ (capacity − n)·window/limit
//	then F' = now + d + n·window/limit
//
// A full bucket therefore admits exactly its capacity, in any split of
// costs, and Remaining is exactly the largest cost that would pass. The one
// rounding is time itself: calls happen at whole microseconds, so a call
// waits for the first whole µs at which its tokens are there (RetryAfter),
// and ResetAfter is the debt rounded up to a whole µs.
//
// An edited rule reads the same debt at its own rate. A remainder counted in
// another limit (the limit was edited) is rounded up to the next whole µs of
// debt: the caller waits at most 1 µs more, never gets more. A debt above
// the empty bucket's, capacity·window/limit, is owed as it is when it is
// at most maxQueue beyond it: reservations handed out ahead (Reserve), or
// debt built at the rate of a rule since edited to a smaller burst or a
// higher rate, which is paid off before the new rule admits a call. A
// check never erases reservations. Debt further beyond — the clock went
// backwards — is clamped to an empty bucket and the clamped state written,
// so a skewed clock costs at most maxQueue and one full refill. Otherwise
// only an allowed call writes state.
//
// The rule's validation (Params.Check) keeps capacity·window/limit, the time
// an empty bucket takes to refill, at most MaxRefill, so that F stays below
// 2^53 µs past take.lua's origin for every instant an int64 of ns can name.

// tbDebt is the debt at now of the stored state s, as whole µs q and a
// remainder r in 1/limit µs; norm is s with a remainder counted in another
// limit rounded up to the next µs (it reads the same at every instant).
func tbDebt(p Params, s State, now int64) (q, r int64, norm State) {
	norm = s
	if s.A != 0 && int64(s.B) != p.Limit {
		norm = State{T: s.T + 1}
	}
	if norm.T == 0 || norm.T < now {
		return 0, 0, norm
	}
	return norm.T - now, int64(norm.A), norm
}

// tbState is the state whose debt at now is (q, r).
func tbState(p Params, now, q, r int64) State {
	if r == 0 {
		return State{T: now + q}
	}
	return State{T: now + q, A: float64(r), B: float64(p.Limit)}
}

// lePair reports (q, r) ≤ (q2, r2), both remainders in the same 1/limit µs.
func lePair(q, r, q2, r2 int64) bool { return q < q2 || q == q2 && r <= r2 }

// tbRemaining is the largest cost m ≤ capacity that one call could take at
// debt (q, r): capacity − ⌈(q·limit + r)/window⌉.
func tbRemaining(p Params, q, r, capacity int64) int64 {
	k := tbOwed(p, q, r)
	if k >= capacity {
		return 0
	}
	return capacity - k
}

// tbOwed is ⌈(q·limit + r)/window⌉, the tokens a debt of (q, r) is, rounded
// up: the least k with (q, r) ≤ k·window/limit. Exact; take.lua finds it
// from an estimate checked by the same comparison.
func tbOwed(p Params, q, r int64) int64 {
	if q == 0 && r == 0 {
		return 0
	}
	// q·limit + r < 2^81: in two words.
	hi, lo := mul64(uint64(q), uint64(p.Limit))
	lo, c := add64(lo, uint64(r))
	hi += c
	k, rem := div64(hi, lo, uint64(p.Window))
	if rem > 0 {
		k++
	}
	return int64(k)
}

// tokenBucket writes the result of a call to *res and the new state to
// *ns (which is not s).
func tokenBucket(p *Params, s *State, now, cost int64, res *Result, ns *State) {
	capacity := p.Capacity()
	// One token is window/limit µs = wq + wr/limit: the one division of the
	// call besides tbOwed's; every other product below reuses it.
	tok := tokenOf(*p)
	tq, tr := p.Window, int64(0) // an empty bucket's debt, capacity·window/limit
	if capacity != p.Limit {
		tq, tr = tok.times(capacity)
	}
	q, r, base := tbDebt(*p, *s, now)
	clamped := false
	if !lePair(q, r, tq+maxQueue, tr) {
		q, r, clamped = tq, tr, true
		base = tbState(*p, now, q, r)
	}
	reset := q
	if r > 0 {
		reset++
	}
	if cost > capacity {
		if p.Charge && cost > 0 {
			tbCharge(p, tok, tq, tr, q, r, now, cost, capacity, res, ns)
			return
		}
		*res = Result{Reason: ReasonCostExceedsCapacity, Remaining: tbRemaining(*p, q, r, capacity),
			ResetAfter: reset, Changed: clamped}
		*ns = base
		return
	}
	cq, cr := tok.times(cost)
	// The most debt the call may find, (capacity − cost)·window/limit, is
	// the empty bucket's debt less the call's: exact, with a borrow.
	aq, ar := tq-cq, tr-cr
	if ar < 0 {
		aq, ar = aq-1, ar+p.Limit
	}
	if lePair(q, r, aq, ar) {
		// A full bucket owes exactly cost tokens after the call (its debt
		// is cost·window/limit): no division needed.
		remaining := capacity - cost
		if q != 0 || r != 0 {
			q, r = q+cq, r+cr
			if r >= p.Limit {
				q, r = q+1, r-p.Limit
			}
			remaining = tbRemaining(*p, q, r, capacity)
		} else {
			q, r = cq, cr
		}
		reset = q
		if r > 0 {
			reset++
		}
		*res = Result{
			Allowed:    true,
			Remaining:  remaining,
			ResetAfter: reset,
			Changed:    true,
		}
		*ns = tbState(*p, now, q, r)
		return
	}
	if p.Charge && cost > 0 {
		tbCharge(p, tok, tq, tr, q, r, now, cost, capacity, res, ns)
		return
	}
	// Denied: the first whole µs t at which the debt F − t ≤ (aq, ar):
	// t = T − aq when the remainder fits, else one µs later.
	t := base.T - aq
	if int64(base.A) > ar {
		t++
	}
	*res = Result{Reason: ReasonLimited, Remaining: tbRemaining(*p, q, r, capacity),
		ResetAfter: reset, RetryAfter: t - now, Changed: clamped}
	*ns = base
}

// tbCharge takes a charge of cost that does not fit a bucket at debt (q,
// r) (Params.Charge): the debt grows by cost tokens, up to maxQueue beyond
// an empty bucket's (tq, tr), and the call is answered denied, with the
// wait until a call of cost 1 passes.
func tbCharge(p *Params, tok token, tq, tr, q, r, now, cost, capacity int64, res *Result, ns *State) {
	cost = min(cost, maxCharge)
	mq := tq + maxQueue
	if overBound(cost, p.Window, p.Limit, mq+1) {
		// cost·window/limit alone passes the bound: no need (nor room in
		// an int64) to compute it.
		q, r = mq, tr
	} else {
		cq, cr := tok.times(cost)
		q, r = q+cq, r+cr
		if r >= p.Limit {
			q, r = q+1, r-p.Limit
		}
		if !lePair(q, r, mq, tr) {
			q, r = mq, tr
		}
	}
	reset := q
	if r > 0 {
		reset++
	}
	// A call of cost 1 passes at the first whole µs at which the debt is
	// at most (capacity − 1)·window/limit, the empty bucket's less a token.
	aq, ar := tq-tok.q, tr-tok.r
	if ar < 0 {
		aq, ar = aq-1, ar+p.Limit
	}
	retry := q - aq
	if r > ar {
		retry++
	}
	*res = Result{Reason: ReasonLimited, Remaining: tbRemaining(*p, q, r, capacity),
		ResetAfter: reset, RetryAfter: retry, Changed: true}
	*ns = tbState(*p, now, q, r)
}
