package failover_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store/failover"
)

// waitLimiter is a limiter over busyFailover with cfg: every call reaches
// the healthy Redis at addr only after delay.
func waitLimiter(t *testing.T, addr string, delay time.Duration, cfg failover.Config) (*failover.Store, *limiter.Limiter) {
	t.Helper()
	cfg.Instances, cfg.Logger = 1, testLogger()
	fo := busyFailover(t, addr, delay, cfg)
	return fo, limitertest.Over(t, fo, faultRules)
}

// TestCallerCancelEndsTheWait: a caller that gives up while its call waits
// for the store gets its context's error at once, not when the store
// answers; the breaker is not told anything about the store.
func TestCallerCancelEndsTheWait(t *testing.T) {
	srv := redistest.Start(t)
	fo, l := waitLimiter(t, srv.Addr(), 10*time.Second, failover.Config{Timeout: time.Minute, MaxWait: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	start := time.Now()
	d, err := l.Check(ctx, &limiter.Request{User: "u", Method: "GET", Path: "/api/orders"})
	if took := time.Since(start); !errors.Is(err, context.Canceled) || took > 2*time.Second {
		t.Fatalf("Check cancelled after 20 ms, the store's answer 10 s away = %+v, %v after %v; want context.Canceled within 2 s", d, err, took)
	}
	if n := fo.Stats().Errors.Load(); n != 0 {
		t.Errorf("store errors after a caller gave up = %d, want 0", n)
	}
	if st, reason := fo.State(); st != failover.Closed {
		t.Errorf("breaker %s (%s), want closed", st, reason)
	}
}

// TestOverdueThenMaxWait: a call still out after Timeout is counted
// overdue once (the breaker probes the healthy store, and stays closed),
// and one still out after MaxWait is answered locally then, not when the
// store answers.
func TestOverdueThenMaxWait(t *testing.T) {
	srv := redistest.Start(t)
	fo, l := waitLimiter(t, srv.Addr(), 3*time.Second,
		failover.Config{Timeout: 20 * time.Millisecond, MaxWait: 200 * time.Millisecond})
	start := time.Now()
	d, err := l.Check(context.Background(), &limiter.Request{User: "u", Method: "GET", Path: "/api/orders"})
	took := time.Since(start)
	if err != nil || !d.Allowed || d.Origin != limiter.OriginLocalFallback {
		t.Fatalf("Check with the store's answer 3 s away = %+v, %v; want allowed by the local fallback", d, err)
	}
	if took < 200*time.Millisecond || took > 2*time.Second {
		t.Errorf("Check answered after %v, want MaxWait (200 ms) or a little more", took)
	}
	if n := fo.Stats().Overdue.Load(); n != 1 {
		t.Errorf("overdue calls = %d, want 1", n)
	}
	if st, reason := fo.State(); st != failover.Closed {
		t.Errorf("breaker %s (%s), want closed: Redis was healthy", st, reason)
	}
}
