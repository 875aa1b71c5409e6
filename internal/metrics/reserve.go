package metrics

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/limiter"
)

var _ limiter.Reserver = (*Store)(nil)

// Reserve implements limiter.Reserver when the wrapped store does, timed
// and counted as Take is; otherwise it fails with
// limiter.ErrReserveUnsupported naming the wrapped store.
func (s *Store) Reserve(ctx context.Context, ops []limiter.Op, res []algorithm.Result, maxWait int64) (limiter.TakeInfo, int64, error) {
	rs, ok := s.next.(limiter.Reserver)
	if !ok {
		return limiter.TakeInfo{}, 0, fmt.Errorf("%w (%T)", limiter.ErrReserveUnsupported, s.next)
	}
	start := time.Now()
	info, wait, err := rs.Reserve(ctx, ops, res, maxWait)
	s.done(start, err)
	return info, wait, err
}
