package algorithm

// Sliding window counter: windows aligned like FixedWindow, and an estimate
// of the calls in the last window: previous × (1 − elapsed fraction) +
// current. Approximate by design — it assumes the previous window's calls
// were spread evenly — but smooths the fixed window's boundary burst with
// two counters of state.
//
// The estimate is compared in exact integers: a call of cost c passes when
// cur + ⌈prev·(window − elapsed)/window⌉ + c ≤ limit, the same in Go and in
// take.lua, and RetryAfter solves it for the first passing µs.
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

// swOwed is ⌈prev·(window − elapsed)/window⌉, the previous window's calls
// still counted at now, rounded up; exact.
func swOwed(p Params, start, now int64, prev float64) int64 {
	q, r := mulDivW(int64(prev), p.Window-(now-start), p.Window)
	if r > 0 {
		q++
	}
	return q
}

// swRemaining is ⌊limit − estimate⌋ at now, at least 0: the largest cost
// that passes. Exact: limit − cur − ⌈prev·(window − elapsed)/window⌉.
func swRemaining(p Params, start, now int64, cur, prev float64) int64 {
	r := p.Limit - int64(cur) - swOwed(p, start, now, prev)
	if r < 0 {
		return 0
	}
	return r
}

// swAfter is the first instant at which k calls fit beside prev calls of
// the window that started at start: prev·(window − elapsed) ≤ k·window,
// elapsed = window − ⌊k·window/prev⌋. 0 ≤ k, prev ≥ 1.
func swAfter(p Params, start, k int64, prev float64) int64 {
	if k >= int64(prev) {
		return start // they fit at once
	}
	q, _ := mulDiv(k, p.Window, int64(prev))
	return start + p.Window - q
}

func slidingWindow(p Params, s State, now, cost int64) (Result, State) {
	start, cur, prev, rebased := swCounts(p, s, now)
	base := s
	if rebased {
		base = State{T: start, A: cur, B: prev}
	}
	left := swRemaining(p, start, now, cur, prev)
	resetAfter := func(cur, prev float64) int64 {
		switch {
		case cur > 0:
			return start + 2*p.Window - now
		case prev > 0:
			return start + p.Window - now
		}
		return 0
	}
	r := Result{Remaining: left, ResetAfter: resetAfter(cur, prev), Changed: rebased}
	if cost > p.Limit {
		r.Reason = ReasonCostExceedsCapacity
		return r, base
	}
	if cost <= left {
		cur += float64(cost)
		return Result{
			Allowed:    true,
			Remaining:  left - cost,
			ResetAfter: resetAfter(cur, prev),
			Changed:    true,
		}, State{T: start, A: cur, B: prev}
	}

	// Denied. Within the current window the estimate falls as prev's weight
	// does; in the next one, cur becomes prev. Both solve exactly.
	var t int64
	switch c := int64(cur); {
	case c+cost <= p.Limit && prev > 0:
		t = swAfter(p, start, p.Limit-c-cost, prev)
	case c > 0:
		t = swAfter(p, start+p.Window, p.Limit-cost, cur)
	default:
		t = start + p.Window
	}
	r.Reason = ReasonLimited
	r.RetryAfter = t - now
	return r, base
}
