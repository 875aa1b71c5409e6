package failover

import (
	"context"
	"errors"
	"strings"
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
				cctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
				start := time.Now()
				info, wait, err := rs.Reserve(cctx, ops, res, maxWait)
				cancel()
				if fn := s.onCall.Load(); fn != nil {
					(*fn)(time.Since(start), err)
				}
				s.count(start)
				if err == nil {
					s.stats.Store.Add(1)
					return info, wait, nil
				}
				if ctx.Err() != nil {
					return limiter.TakeInfo{}, 0, ctx.Err()
				}
				if errors.Is(err, algorithm.ErrReserveKind) || errors.Is(err, limiter.ErrReserveUnsupported) || errors.Is(err, limiter.ErrTooManyRules) {
					return limiter.TakeInfo{}, 0, err
				}
				if errors.Is(err, context.DeadlineExceeded) {
					s.stats.Timeouts.Add(1)
				} else {
					s.stats.Errors.Add(1)
				}
				if len(ops) > 0 {
					client := strings.Clone(ops[0].Client)
					s.failing.Store(&client)
				}
				if n := s.fails.Add(1); int(n) >= s.cfg.FailureThreshold && n*10 >= s.calls.Load() {
					s.trip(err)
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
