package failover

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store/memory"
)

// newFallback makes the embedded store the degraded path takes from.
func (s *Store) newFallback() *memory.Store {
	m, err := memory.New(memory.Config{SweepInterval: 10 * time.Second, Clock: s.memClock})
	if err != nil {
		panic(err) // the default config is valid
	}
	return m
}

// degraded decides without the shared store, for a call to the shard sh
// (whose count it adds to): fail-closed rules deny, the others take from
// the local fallback with limits divided by the live instance count.
func (s *Store) degraded(ctx context.Context, sh *shard, ops []limiter.Op, res []algorithm.Result) (limiter.TakeInfo, error) {
	if s.cfg.Denials != nil {
		if info, ok := s.cfg.Denials.DenyLocally(ops, res, s.cfg.Now()); ok {
			s.stats.LocalDenials.Add(1)
			return info, nil
		}
	}
	now := s.cfg.Now().UnixMicro()
	for i := range ops {
		if ops[i].FailClosed && !ops[i].Shadow {
			retry := s.cfg.ProbeInterval.Microseconds()
			for j := range ops {
				res[j] = algorithm.Result{Allowed: true, Remaining: 1 << 62}
			}
			res[i] = algorithm.Result{Reason: algorithm.ReasonStoreUnavailable, RetryAfter: retry, ResetAfter: retry}
			s.stats.Unavailable.Add(1)
			sh.local.Add(1)
			return limiter.TakeInfo{Now: now, Origin: limiter.OriginUnavailable}, nil
		}
	}
	n := s.live.Load()
	if n < 1 {
		n = 1
	}
	var buf [limiter.MaxRulesPerCall]limiter.Op
	local := buf[:0]
	for _, op := range ops {
		op.Params = scale(op.Params, n)
		local = append(local, op)
	}
	// Without the caller's deadline: a call whose wait for the store ended
	// just before it is answered all the same.
	info, err := s.fallback.Take(context.WithoutCancel(ctx), local, res)
	if err != nil {
		return info, fmt.Errorf("failover: local fallback: %w", err)
	}
	s.stats.Fallback.Add(1)
	sh.local.Add(1)
	info.Origin = limiter.OriginLocalFallback
	return info, nil
}

// scale returns p with its allowance divided among n instances, rounded up
// so that no instance gets nothing: limit and burst (token bucket capacity,
// leaky bucket burst+1) become ceil(x/n).
func scale(p algorithm.Params, n int64) algorithm.Params {
	if n <= 1 {
		return p
	}
	capacity := p.Capacity()
	p.Limit = ceilDiv(p.Limit, n)
	switch p.Kind {
	case algorithm.TokenBucket:
		p.Burst = ceilDiv(capacity, n)
	case algorithm.LeakyBucket:
		// Burst counts calls beyond the first; 0 would mean the default (1).
		p.Burst = max(ceilDiv(capacity, n)-1, 1)
	}
	if p.Kind == algorithm.SlidingLog && p.Limit > algorithm.MaxLogLimit {
		p.Limit = algorithm.MaxLogLimit
	}
	return p
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
