package failover

import (
	"context"
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
	var buf [2]target
	down := s.shards.whole
	if State(s.state.Load()) == Closed {
		if b := s.primary.Load(); b != nil {
			ts := s.targets(b, ops, buf[:0])
			down = open(ts)
			if rs, ok := b.p.(limiter.Reserver); ok && down == nil {
				if info, wait, err, decided := s.reserveShared(ctx, rs, ts, ops, res, maxWait); decided {
					return info, wait, err
				}
			}
			if down == nil {
				down = ts[0].sh
			}
		}
	}
	retry := s.cfg.ProbeInterval.Microseconds()
	for i := range ops {
		res[i] = algorithm.Result{Reason: algorithm.ReasonStoreUnavailable, RetryAfter: retry, ResetAfter: retry}
	}
	s.stats.Unavailable.Add(1)
	down.local.Add(1)
	return limiter.TakeInfo{Now: time.Now().UnixMicro(), Origin: limiter.OriginUnavailable}, 0, nil
}

// reserveShared is takeShared for a reservation: the same wait, the same
// handling of the store's failures (returned). decided is false when the
// reservation must be denied as while the store is unavailable.
func (s *Store) reserveShared(ctx context.Context, rs limiter.Reserver, ts []target, ops []limiter.Op, res []algorithm.Result, maxWait int64) (info limiter.TakeInfo, wait int64, err error, decided bool) {
	w := s.newWait(ctx, ts, ops)
	info, wait, err = rs.Reserve(w, ops, res, maxWait)
	if err, decided = s.returned(w, err); err != nil || !decided {
		return limiter.TakeInfo{}, 0, err, decided
	}
	return info, wait, nil, true
}
