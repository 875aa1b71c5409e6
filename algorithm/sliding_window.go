package algorithm

// Sliding window counter: windows aligned like FixedWindow, and an estimate
// of the calls in the last window: previous × (1 − elapsed fraction) +
// current. Approximate by design — it assumes the previous window's calls
// were spread evenly — but smooths the fixed window's boundary burst with
// two counters of state.
//
// State: T = start of the current window (µs), A = its count, B = the
// previous window's count.

// swCounts returns the window start, current and previous counts at now.
func swCounts(p Params, s State, now int64) (start int64, cur, prev float64, rebased bool) {
	start = now - now%p.Window
	switch {
	case s.T == start:
		return start, s.A, s.B, false
	case s.T == start-p.Window:
		return start, 0, s.A, false
	case s.T > start: // clock went backwards: carry the counts over
		return start, s.A, s.B, true
	}
	return start, 0, 0, false
}

// swEstimate is prev*(window-elapsed)/window + cur. Lua: the same order.
func swEstimate(p Params, start, now int64, cur, prev float64) float64 {
	return float64(float64(prev*float64(p.Window-(now-start)))/float64(p.Window)) + cur
}

func swPasses(p Params, s State, at, cost int64) bool {
	start, cur, prev, _ := swCounts(p, s, at)
	return swEstimate(p, start, at, cur, prev)+float64(cost) <= float64(p.Limit)
}

func slidingWindow(p Params, s State, now, cost int64) (Result, State) {
	start, cur, prev, rebased := swCounts(p, s, now)
	limit := float64(p.Limit)
	base := s
	if rebased {
		base = State{T: start, A: cur, B: prev}
	}
	est := swEstimate(p, start, now, cur, prev)
	remaining := func(e float64) int64 {
		if e >= limit {
			return 0
		}
		return floorI(limit - e)
	}
	resetAfter := func(cur, prev float64) int64 {
		switch {
		case cur > 0:
			return start + 2*p.Window - now
		case prev > 0:
			return start + p.Window - now
		}
		return 0
	}
	r := Result{Remaining: remaining(est), ResetAfter: resetAfter(cur, prev), Changed: rebased}
	if cost > p.Limit {
		r.Reason = ReasonCostExceedsCapacity
		return r, base
	}
	c := float64(cost)
	if est+c <= limit {
		cur += c
		return Result{
			Allowed:    true,
			Remaining:  remaining(est + c),
			ResetAfter: resetAfter(cur, prev),
			Changed:    true,
		}, State{T: start, A: cur, B: prev}
	}

	// Denied. Within the current window the estimate falls as prev's weight
	// does; in the next one, cur becomes prev. Solve each for the earliest
	// passing instant, then step past rounding with the real test.
	bStart, bCur, bPrev, _ := swCounts(p, base, now)
	w := float64(p.Window)
	var t int64
	switch {
	case bCur+c <= limit && bPrev > 0:
		t = bStart + ceilF(w-float64(float64(limit-bCur-c)*w)/bPrev)
	case bCur > 0 && c <= limit:
		t = bStart + p.Window + ceilF(w-float64(float64(limit-c)*w)/bCur)
	default:
		t = bStart + p.Window
	}
	if t <= now {
		t = now + 1
	}
	for !swPasses(p, base, t, cost) {
		t++
	}
	for t > now+1 && swPasses(p, base, t-1, cost) {
		t--
	}
	r.Reason = ReasonLimited
	r.RetryAfter = t - now
	return r, base
}
