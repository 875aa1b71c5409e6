package algorithm

// Leaky bucket as a meter (GCRA), not a queue: conforming calls leak out at
// limit per window, one every interval I; burst (default 1) extra calls are
// tolerated, so an empty meter admits burst+1 calls at once.
//
// State: T = theoretical arrival time (TAT), the instant the meter is empty
// again, in whole µs. The interval is window/limit rounded up to a whole
// microsecond, so all arithmetic is exact integers in Go and in Lua; the
// cost is a rate at most 1 µs per call slower than limit/window, and at
// most 1,000,000 calls a second per bucket. The rule's validation
// (Params.Check) keeps (burst+1)·interval, the time an empty meter takes to
// drain, at most MaxRefill.
//
// Debt TAT−now beyond an empty meter's, (burst+1)·I, is owed as it is
// when it is at most maxQueue beyond it: reservations handed out ahead
// (Reserve), or debt built at the rate of a rule since edited to a higher
// rate or a smaller burst, paid off before the new rule admits a call. A
// check never erases reservations. Debt further beyond — the clock went
// backwards — is clamped and the clamped state written.

// interval is the leaky bucket's emission interval: ceil(window/limit) µs.
func (p Params) interval() int64 { return ceilDiv(p.Window, p.Limit) }

// lbTAT is the meter's TAT at now, computed from the stored state alone.
func lbTAT(s State, now, maxDebt int64) (tat int64, clamped bool) {
	tat = s.T
	if tat < now {
		tat = now
	}
	if tat-now > maxDebt+maxQueue {
		return now + maxDebt, true
	}
	return tat, false
}

func leakyBucket(p Params, s State, now, cost int64) (Result, State) {
	capacity := p.Capacity()
	interval := p.interval()
	maxDebt := capacity * interval
	tat, clamped := lbTAT(s, now, maxDebt)

	base := s
	if clamped {
		base = State{T: tat}
	}
	remaining := func(t int64) int64 {
		if r := (maxDebt - (t - now)) / interval; r > 0 {
			return r
		}
		return 0
	}
	if cost > capacity {
		if p.Charge && cost > 0 {
			return lbCharge(p, tat, now, cost, interval, maxDebt)
		}
		return Result{
			Reason:     ReasonCostExceedsCapacity,
			Remaining:  remaining(tat),
			ResetAfter: tat - now,
			Changed:    clamped,
		}, base
	}
	next := tat + cost*interval
	if next-now <= maxDebt {
		return Result{
			Allowed:    true,
			Remaining:  remaining(next),
			ResetAfter: next - now,
			Changed:    true,
		}, State{T: next}
	}
	if p.Charge && cost > 0 {
		return lbCharge(p, tat, now, cost, interval, maxDebt)
	}
	// Denied: the first t with tat + cost·I − t ≤ maxDebt.
	return Result{
		Reason:     ReasonLimited,
		Remaining:  remaining(tat),
		ResetAfter: tat - now,
		RetryAfter: next - maxDebt - now,
		Changed:    clamped,
	}, base
}

// lbCharge takes a charge of cost that does not fit (Params.Charge): the
// debt tat − now grows by cost intervals, up to maxQueue beyond maxDebt,
// and the call is answered denied, with the wait until a call of cost 1
// passes.
func lbCharge(p Params, tat, now, cost, interval, maxDebt int64) (Result, State) {
	// Past bound, the debt is the bound whatever the cost: cost·interval
	// is computed only below it, where it is small.
	bound := maxDebt + maxQueue
	cost = min(cost, bound/interval+1)
	debt := min(tat-now+cost*interval, bound)
	r := (maxDebt - debt) / interval
	return Result{
		Reason:     ReasonLimited,
		Remaining:  max(r, 0),
		ResetAfter: debt,
		RetryAfter: debt + interval - maxDebt,
		Changed:    true,
	}, State{T: now + debt}
}
