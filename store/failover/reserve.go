package failover

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/limiter"
)

var _ limiter.Reserver = (*Store)(nil)

// Reserve implements limiter.Reserver through the shared store. A
// reservation is never served from the local fallback: its slot is a place
// in a queue that every instance shares, which a local bucket cannot give.
// While the shared store is unavailable (or cannot reserve), every
// reservation is denied as a fail-closed rule's call is: reason
// store_unavailable, retry after the next probe.
func (s *Store) Reserve(ctx context.Context, ops []limiter.Op, res []algorithm.Result, maxWait int64) (limiter.TakeInfo, int64, error) {
	if State(s.state.Load()) == Closed {
		if b := s.primary.Load(); b != nil {
			if rs, ok := b.p.(limiter.Reserver); ok {
				if info, wait, err, decided := s.reserveShared(ctx, rs, ops, res, maxWait); decided {
					return info, wait, err
				}
			}
		}
	}
	retry := s.cfg.ProbeInterval.Microseconds()
	for i := range ops {
		res[i] = algorithm.Result{Reason: algorithm.ReasonStoreUnavailable, RetryAfter: retry, ResetAfter: retry}
	}
	s.stats.Unavailable.Add(1)
	return limiter.TakeInfo{Now: time.Now().UnixMicro(), Source: limiter.SourceUnavailable}, 0, nil
}

// reserveShared is takeShared for a reservation: the same deadline, the
// same accounting of the store's failures. decided is false when the
// reservation must be denied as while the store is unavailable.
func (s *Store) reserveShared(ctx context.Context, rs limiter.Reserver, ops []limiter.Op, res []algorithm.Result, maxWait int64) (info limiter.TakeInfo, wait int64, err error, decided bool) {
	e := s.opened.Load()
	start := time.Now()
	end, capped := s.deadlineAt(ctx, start)
	w := s.newWait(ctx, e, ops, start, end)
	info, wait, err = rs.Reserve(w, ops, res, maxWait)
	took := time.Since(start)
	w.finish()
	s.called(took, err)
	if err == nil {
		return info, wait, nil, true
	}
	if callerGone(ctx, err, capped) {
		return limiter.TakeInfo{}, 0, ctx.Err(), true
	}
	if errors.Is(err, algorithm.ErrReserveKind) || errors.Is(err, limiter.ErrReserveUnsupported) || errors.Is(err, limiter.ErrTooManyRules) {
		return limiter.TakeInfo{}, 0, err, true // the call's, not the store's
	}
	s.stats.Errors.Add(1)
	if errors.Is(err, limiter.ErrStoreReply) || e.ctx.Err() != nil || timedOut(err) {
		return limiter.TakeInfo{}, 0, nil, false
	}
	s.suspectCall(ops)
	s.failed(err, ops)
	return limiter.TakeInfo{}, 0, nil, false
}
