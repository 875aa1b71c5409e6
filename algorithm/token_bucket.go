package algorithm

// Token bucket: capacity burst (default limit), refilled lazily at limit per
// window; a new bucket starts full. A call of cost n takes n tokens or none.
//
// State: T = time of the last refill (0 = new bucket), A = tokens then.
// Only an allowed call writes state (and a clock that went backwards, which
// rebases T onto now without refilling the gap).

// tbTokens is the token count at now, computed from the stored state alone,
// so that a later evaluation of the same stored state reproduces it exactly.
func tbTokens(p Params, s State, now int64) float64 {
	capacity := float64(p.Capacity())
	if s.T == 0 {
		return capacity
	}
	tokens := s.A
	if now > s.T {
		tokens = tokens + refill(now-s.T, p)
	}
	if tokens > capacity {
		tokens = capacity // also clamps a bucket whose burst was lowered
	}
	return tokens
}

func tokenBucket(p Params, s State, now, cost int64) (Result, State) {
	capacity := p.Capacity()
	tokens := tbTokens(p, s, now)

	// The state a denied call leaves behind: unchanged, unless the clock went
	// backwards, in which case time restarts from now.
	base, changed := s, false
	if s.T == 0 || now < s.T {
		base, changed = State{T: now, A: tokens}, s.T != 0
	}

	if cost > capacity {
		return Result{
			Reason:     ReasonCostExceedsCapacity,
			Remaining:  floorI(tokens),
			ResetAfter: tbFullAfter(p, tokens),
			Changed:    changed,
		}, base
	}
	c := float64(cost)
	if tokens >= c {
		left := tokens - c
		return Result{
			Allowed:    true,
			Remaining:  floorI(left),
			ResetAfter: tbFullAfter(p, left),
			Changed:    true,
		}, State{T: now, A: left}
	}

	// Denied: the first instant t at which the stored state yields cost
	// tokens. Solve base.A + (t-base.T)*limit/window >= cost, then step
	// past any rounding, both ways, so that the very evaluation a retry will
	// run agrees: the answer is the exact first passing microsecond.
	t := base.T + ceilDuration(c-base.A, p)
	for tbTokens(p, base, t) < c {
		t++
	}
	for t > now+1 && tbTokens(p, base, t-1) >= c {
		t--
	}
	if t <= now {
		t = now + 1
	}
	return Result{
		Reason:     ReasonLimited,
		Remaining:  floorI(tokens),
		ResetAfter: tbFullAfter(p, tokens),
		RetryAfter: t - now,
		Changed:    changed,
	}, base
}

// tbFullAfter is the time until a bucket holding tokens now is full again.
func tbFullAfter(p Params, tokens float64) int64 {
	return ceilDuration(float64(p.Capacity())-tokens, p)
}
