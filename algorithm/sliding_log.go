package algorithm

// Sliding log: the time of every admitted call (one entry per unit of cost);
// a call passes when the calls logged in the window plus its cost fit the
// limit. Exact, never more than limit in any window, at the price of state
// that grows with the limit (capped at MaxLogLimit).
//
// State: Log = admitted call times (µs), ascending. A call is logged at now,
// or at the newest logged time if that is later (the clock went backwards),
// so the log stays in order; an entry counts until its own time + window.
// A skewed clock thus blocks for at most the skew, never admits a call more,
// and a call never rewrites what is logged: take.lua keeps one sorted-set
// entry per call (its time, its cost), so a call's work in Redis does not
// grow with its cost.

func slidingLog(p Params, s State, now, cost int64) (Result, State) {
	log := s.Log
	changed := false
	// Drop entries that have left the window: t <= now - window.
	cut := 0
	for cut < len(log) && log[cut] <= now-p.Window {
		cut++
	}
	if cut > 0 {
		log = log[cut:] // reslice, not copy: s stays valid for a caller that drops the result
		changed = true
	}
	count := int64(len(log))
	base := State{Log: log}
	at := now
	if count > 0 && log[count-1] > at {
		at = log[count-1]
	}
	resetAfter := int64(0)
	if count > 0 {
		resetAfter = log[count-1] + p.Window - now
	}
	remaining := p.Limit - count
	if remaining < 0 {
		remaining = 0
	}
	r := Result{Remaining: remaining, ResetAfter: resetAfter, Changed: changed}
	if cost > p.Limit {
		r.Reason = ReasonCostExceedsCapacity
		return r, base
	}
	if count+cost <= p.Limit {
		if cost == 0 { // a call of cost 0 logs nothing
			return Result{Allowed: true, Remaining: remaining, ResetAfter: resetAfter, Changed: changed}, base
		}
		for i := int64(0); i < cost; i++ {
			log = append(log, at)
		}
		return Result{
			Allowed:    true,
			Remaining:  p.Limit - count - cost,
			ResetAfter: at + p.Window - now,
			Changed:    true,
		}, State{Log: log}
	}
	// Denied: the (count+cost-limit)-th oldest entry must leave the window,
	// which it does at its time + window.
	k := count + cost - p.Limit
	r.Reason = ReasonLimited
	r.RetryAfter = log[k-1] + p.Window - now
	return r, base
}
