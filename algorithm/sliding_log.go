package algorithm

// Sliding log: the time of every admitted call (one entry per unit of cost);
// a call passes when the calls in (now − window, now] plus its cost fit the
// limit. Exact, never more than limit in any window, at the price of state
// that grows with the limit (capped at MaxLogLimit).
//
// State: Log = admitted call times (µs), ascending. Entries later than now
// (the clock went backwards) are moved back to now.

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
	if len(log) > 0 && log[len(log)-1] > now {
		log = append([]int64(nil), log...) // copy before rewriting: rare
		for i := len(log) - 1; i >= 0 && log[i] > now; i-- {
			log[i] = now
		}
		changed = true
	}
	count := int64(len(log))
	base := State{Log: log}
	resetAfter := func(l []int64) int64 {
		if len(l) == 0 {
			return 0
		}
		return l[len(l)-1] + p.Window - now
	}
	remaining := p.Limit - count
	if remaining < 0 {
		remaining = 0
	}
	r := Result{Remaining: remaining, ResetAfter: resetAfter(log), Changed: changed}
	if cost > p.Limit {
		r.Reason = ReasonCostExceedsCapacity
		return r, base
	}
	if count+cost <= p.Limit {
		for i := int64(0); i < cost; i++ {
			log = append(log, now)
		}
		return Result{
			Allowed:    true,
			Remaining:  p.Limit - count - cost,
			ResetAfter: p.Window,
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
