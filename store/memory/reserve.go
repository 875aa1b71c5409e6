package memory

import (
	"context"
	"fmt"
	"hash/maphash"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/limiter"
)

var _ limiter.Reserver = (*Store)(nil)

// Reserve implements limiter.Reserver: under the locks of every op's shard,
// it finds the least wait T after which every non-shadow op's bucket admits
// the call (algorithm.FirstAllowed) and, when T ≤ maxWait, takes every op
// at now+T; otherwise it takes nothing.
func (s *Store) Reserve(ctx context.Context, ops []limiter.Op, res []algorithm.Result, maxWait int64) (limiter.TakeInfo, int64, error) {
	if err := ctx.Err(); err != nil {
		return limiter.TakeInfo{}, 0, err
	}
	n := len(ops)
	if len(res) < n {
		return limiter.TakeInfo{}, 0, fmt.Errorf("memory: len(res) = %d, want at least len(ops) = %d", len(res), n)
	}
	if n == 0 {
		return limiter.TakeInfo{Now: s.clock()}, 0, nil
	}
	if maxWait < 0 {
		maxWait = 0
	}
	var slotBuf [stackOps]slot
	var lockBuf [stackOps]uint32
	var stateBuf [stackOps]algorithm.State
	var slots []slot
	var states []algorithm.State
	locks := lockBuf[:0]
	if n <= stackOps {
		slots, states = slotBuf[:n:n], stateBuf[:n:n]
	} else {
		slots, states, locks = make([]slot, n), make([]algorithm.State, n), make([]uint32, 0, n)
	}
	for i := range ops {
		op := &ops[i]
		if err := checkOp(op); err != nil {
			return limiter.TakeInfo{}, 0, fmt.Errorf("%w: op %d (client %q, rule %q): %v", ErrInvalidOp, i, op.Client, op.Rule, err)
		}
		if !algorithm.CanReserve(op.Params.Kind) {
			return limiter.TakeInfo{}, 0, fmt.Errorf("memory: op %d (client %q, rule %q): %w, not %s", i, op.Client, op.Rule, algorithm.ErrReserveKind, op.Params.Kind)
		}
		h := maphash.String(s.seed, op.Client)
		slots[i].hash = h
		for j := range i {
			if slots[j].hash == h && ops[j].Rule == op.Rule && ops[j].Client == op.Client {
				return limiter.TakeInfo{}, 0, fmt.Errorf("%w: ops %d and %d (client %q, rule %q)", ErrDuplicateOp, j, i, op.Client, op.Rule)
			}
		}
		locks, _ = insertSorted(locks, uint32(h&s.mask))
	}

	for _, k := range locks {
		s.shards[k].mu.Lock()
	}
	defer func() {
		for _, k := range locks {
			s.shards[k].mu.Unlock()
		}
	}()
	now := s.clock()
	sec := s.seconds(now)

	// The least wait at which every non-shadow op admits the call.
	var wait int64
	never := false
	for i := range ops {
		op := &ops[i]
		s.load(op, &slots[i], sec, &states[i], slots, false)
		at, ok, err := algorithm.FirstAllowed(op.Params, states[i], now, op.Cost)
		if err != nil {
			return limiter.TakeInfo{}, 0, fmt.Errorf("memory: op %d (client %q, rule %q): %w", i, op.Client, op.Rule, err)
		}
		if op.Shadow {
			continue
		}
		if !ok {
			never = true
		} else if at-now > wait {
			wait = at - now
		}
	}
	if never || wait > maxWait {
		for i := range ops {
			op := &ops[i]
			r, _ := algorithm.Apply(op.Params, states[i], now, op.Cost)
			// Nothing is written, even a clamped state: it may be
			// outstanding reservations.
			r.Changed = false
			if r.Reason != algorithm.ReasonCostExceedsCapacity {
				at, ok, _ := algorithm.FirstAllowed(op.Params, states[i], now, op.Cost)
				r.Allowed = ok && at-now <= maxWait
				r.RetryAfter = 0
				if !r.Allowed {
					r.Reason = algorithm.ReasonLimited
					r.RetryAfter = at - now - maxWait
				} else {
					r.Reason = algorithm.ReasonNone
				}
			}
			res[i] = r
		}
		return limiter.TakeInfo{Now: now}, 0, nil
	}

	at := now + wait
	over := false
	for i := range ops {
		op, sl := &ops[i], &slots[i]
		r, st := algorithm.Apply(op.Params, states[i], at, op.Cost)
		r.ResetAfter += wait
		res[i] = r
		if !r.Allowed { // a shadow op that does not admit the call then: not taken
			continue
		}
		s.store(op, sl, &st, now)
		over = over || sl.over
	}
	if over {
		s.warnOverflow()
	}
	return limiter.TakeInfo{Now: now}, wait, nil
}
