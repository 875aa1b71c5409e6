package failover_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/failover"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// The two kinds of call to the shared store, a check and a reservation,
// are held to the same behaviour when Redis fails: the same probes, the
// same breaker, the same counts. Only their degraded answers differ (a
// reservation is never served from the local fallback).

// callRules are faultRules and a bucket rule a reservation can take from.
var callRules = &rules.Set{Rules: append([]rules.Rule{
	{ID: "egress", Match: rules.Match{Plan: "egress"}, By: rules.ByUser, Limit: 10, Window: rules.Duration(time.Second),
		Algorithm: algorithm.LeakyBucket},
}, faultRules.Rules...)}

// calls make one call each to the shared store through l.
var calls = []struct {
	name string
	call func(l *limiter.Limiter) (limiter.Decision, error)
}{
	{"check", func(l *limiter.Limiter) (limiter.Decision, error) {
		return l.Check(context.Background(), &limiter.Request{User: "u", Method: "GET", Path: "/api/orders"})
	}},
	{"reserve", func(l *limiter.Limiter) (limiter.Decision, error) {
		d, _, err := l.Reserve(context.Background(), &limiter.Request{User: "u", Plan: "egress"}, time.Second)
		return d, err
	}},
}

// hungCall starts a Redis and a failover store with timeout and maxWait
// (0: the default) over it, makes call once while Redis answers, pauses Redis (SIGSTOP) and
// makes call again: it returns the store, that call's answer and how long
// it took, and the calls overdue before it (the first, on a loaded
// machine, may be).
func hungCall(t *testing.T, call func(*limiter.Limiter) (limiter.Decision, error), timeout, maxWait time.Duration) (*failover.Store, limiter.Decision, time.Duration, int64) {
	t.Helper()
	srv, fo, l := startFailover(t, func(c *sredis.Config, f *failover.Config) {
		// The client sets no deadline on a call out (it pipelines every
		// call): a hung Redis's calls are the breaker's to give up. Its
		// PING, after 30 s without an answer, comes long after.
		c.DialTimeout = time.Second
		f.Timeout, f.MaxWait = timeout, maxWait
	})
	t.Cleanup(srv.Resume) // before the store closes: its reconnects then end at once
	l.SetRules(limitertest.Compile(t, callRules))
	if d, err := call(l); err != nil || d.Origin != limiter.OriginStore {
		t.Fatalf("Redis answering: %+v, %v; want a decision from Redis", d, err)
	}
	overdue := fo.Stats().Overdue.Load()
	srv.Pause()
	start := time.Now()
	d, err := call(l)
	took := time.Since(start)
	if err != nil || !d.Origin.Degraded() {
		t.Fatalf("Redis hung: %+v, %v after %v; want a degraded answer", d, err, took)
	}
	return fo, d, took, overdue
}

// TestHungStoreOpensTheBreaker: a call Redis leaves unanswered goes
// overdue after Timeout and makes the breaker probe; the probes get no
// answer, the breaker opens, and the call is answered then: the breaker is
// open when it returns.
func TestHungStoreOpensTheBreaker(t *testing.T) {
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			fo, _, took, before := hungCall(t, c.call, storeTimeout, 0)
			if st, reason := fo.State(); st != failover.Open {
				t.Errorf("breaker %s (%s) when a call Redis left unanswered was answered (after %v), want open", st, reason, took)
			}
			if n := fo.Stats().Overdue.Load() - before; n != 1 {
				t.Errorf("overdue calls = %d, want 1", n)
			}
		})
	}
}

// TestCallEndedByTheBreakerIsNoError: a call the breaker's opening ended is
// answered locally and is not counted as an error of the store: it did
// not fail, it was given up.
func TestCallEndedByTheBreakerIsNoError(t *testing.T) {
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			fo, _, _, _ := hungCall(t, c.call, storeTimeout, 0)
			if st, reason := fo.State(); st != failover.Open {
				t.Fatalf("breaker %s (%s) when a call Redis left unanswered was answered, want open", st, reason)
			}
			if n := fo.Stats().Errors.Load(); n != 0 {
				t.Errorf("store errors = %d after a call the breaker's opening ended, want 0", n)
			}
		})
	}
}

// TestWaitEndProbes: a call whose wait for Redis ends (MaxWait, here
// before Timeout) is answered locally and makes the breaker probe: on a
// hung Redis the probes fail and the breaker opens.
func TestWaitEndProbes(t *testing.T) {
	const maxWait = 200 * time.Millisecond
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			fo, _, took, _ := hungCall(t, c.call, time.Minute, maxWait)
			if took < maxWait {
				t.Errorf("answered after %v, want after MaxWait (%v)", took, maxWait)
			}
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				if st, _ := fo.State(); st == failover.Open {
					break
				}
				if time.Now().After(deadline) {
					st, reason := fo.State()
					t.Fatalf("breaker %s (%s) 5 s after a call's wait for a hung Redis ended, want open", st, reason)
				}
			}
			if n := fo.Stats().Probes.Load(); n == 0 {
				t.Errorf("no probe after a call's wait for Redis ended")
			}
		})
	}
}
