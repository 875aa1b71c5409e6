package algorithm

// Fixed window: a counter per window, windows aligned to the Unix epoch in
// multiples of window. Cheap and exact within a window, but a caller can
// spend its limit at the end of one window and again at the start of the
// next: up to 2×limit in a short span across a boundary.
//
// State: T = start of the counted window (µs), A = calls counted in it.

// fwWindow returns the window start and count in force at now. A stored
// window later than now's (the clock went backwards) carries its count over
// into now's window, so a skewed clock neither frees nor blocks capacity.
func fwWindow(p Params, s State, now int64) (start int64, count float64, rebased bool) {
	start = now - now%p.Window
	switch {
	case s.T == start:
		return start, s.A, false
	case s.T > start:
		return start, s.A, true
	}
	return start, 0, false
}

func fixedWindow(p Params, s State, now, cost int64) (Result, State) {
	start, count, rebased := fwWindow(p, s, now)
	limit := float64(p.Limit)
	end := start + p.Window
	base := s
	if rebased {
		base = State{T: start, A: count}
	}
	remaining := func(c float64) int64 {
		if c >= limit {
			return 0
		}
		return int64(limit - c)
	}
	r := Result{Remaining: remaining(count), ResetAfter: end - now, Changed: rebased}
	if count == 0 {
		r.ResetAfter = 0
	}
	if p.Charge && cost > 0 && count+float64(cost) > limit {
		// A charge: counted in full (up to maxCharge), past the limit;
		// every call of the window after it is denied.
		count = min(count+float64(min(cost, maxCharge)), limit+maxCharge)
		return Result{Reason: ReasonLimited, ResetAfter: end - now, RetryAfter: end - now, Changed: true},
			State{T: start, A: count}
	}
	if cost > p.Limit {
		r.Reason = ReasonCostExceedsCapacity
		return r, base
	}
	if count+float64(cost) <= limit {
		count += float64(cost)
		reset := end - now
		if count == 0 { // a call of cost 0 on an empty window: whole now
			reset = 0
		}
		return Result{Allowed: true, Remaining: remaining(count), ResetAfter: reset, Changed: true},
			State{T: start, A: count}
	}
	// Denied: the next window starts empty, and cost ≤ limit passes there.
	r.Reason = ReasonLimited
	r.RetryAfter = end - now
	return r, base
}
