package failover_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/clocktest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store/failover"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// TestDenialsOutliveTheClient: a caller Redis denied with a long wait stays
// denied through a whole outage — past the moment the breaker drops its
// connections (the probe that times out, or the third failed one) — and
// after the reconnect, for kill -9 (Redis comes back empty) and SIGSTOP
// (Redis comes back with its keys) alike, until its real retry time; then
// it passes.
func TestDenialsOutliveTheClient(t *testing.T) {
	for _, tc := range []struct {
		name            string
		inject, restore func(*redistest.Server)
	}{
		{"kill", (*redistest.Server).Kill, (*redistest.Server).Restart},
		{"sigstop", (*redistest.Server).Pause, (*redistest.Server).Resume},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			// The failover store's, the denial cache's and the Redis scripts'
			// clock, so that a wait of 30 s passes at once and Redis agrees
			// that it has.
			clock := clocktest.New(time.Now())
			fo, l := newFailoverWith(t, func(r *sredis.Config, f *failover.Config) {
				r.Now, r.Clock, f.Now = clock.Now, clock.Micros, clock.Now
			}, srv.Addr())
			defer fo.Close()
			ctx := context.Background()
			greedy := limiter.Request{User: "greedy", Method: "GET", Path: "/api/orders", Cost: openLimit / 2}
			var retryAt time.Time
			var wait time.Duration
			for i := 0; ; i++ {
				d, err := l.Check(ctx, &greedy)
				if err != nil {
					t.Fatal(err)
				}
				if !d.Allowed {
					if d.Origin != limiter.OriginStore || d.RetryAfter < 20*time.Second {
						t.Fatalf("denial from Redis: %+v, want source store with a wait of ~30 s", d)
					}
					wait = d.RetryAfter
					retryAt = clock.Now().Add(wait)
					break
				}
				if i > 2 {
					t.Fatalf("%d calls of cost %d allowed, limit %d", i+1, greedy.Cost, openLimit)
				}
			}
			denied := func(when string) {
				t.Helper()
				d, err := l.Check(ctx, &greedy)
				if err != nil || d.Allowed {
					st, reason := fo.State()
					t.Fatalf("%s: the exhausted caller got %+v, %v (breaker %s: %s); want denied", when, d, err, st, reason)
				}
			}
			// Other callers' calls reach Redis and fail.
			others := func() {
				var wg sync.WaitGroup
				for i := range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						l.Check(ctx, &limiter.Request{User: fmt.Sprint("other-", i), Method: "GET", Path: "/api/orders"}) //nolint:errcheck
					}()
				}
				wg.Wait()
			}
			tc.inject(srv)
			// Through the outage: the breaker opens, its probes fail and time
			// out, and it drops the connections; 1.5 s of real time covers all
			// of it (ProbeInterval is 100 ms). Half the caller's wait passes.
			for start := time.Now(); time.Since(start) < 1500*time.Millisecond; time.Sleep(5 * time.Millisecond) {
				others()
				denied("during the outage")
			}
			if st, _ := fo.State(); st == failover.Closed {
				t.Fatal("breaker still closed 1.5 s into the outage")
			}
			clock.Advance(retryAt.Sub(clock.Now()) / 2)
			denied("half-way through the wait, Redis down")
			tc.restore(srv)
			for start := time.Now(); ; time.Sleep(5 * time.Millisecond) {
				others()
				denied("across the reconnect")
				if st, _ := fo.State(); st == failover.Closed {
					break
				}
				if time.Since(start) > 5*time.Second {
					t.Fatal("breaker not closed 5 s after Redis answered again")
				}
			}
			// Just before the retry time — less the cache's 0.1 % margin for
			// clocks that run apart, after which Redis decides — still denied.
			clock.Set(retryAt.Add(-wait/1000 - time.Millisecond))
			denied("just before the retry time, Redis back")
			clock.Set(retryAt.Add(time.Millisecond))
			if d, err := l.Check(ctx, &greedy); err != nil || !d.Allowed || d.Origin != limiter.OriginStore {
				t.Errorf("at the retry time: %+v, %v; want allowed by Redis", d, err)
			}
		})
	}
}

// TestProbesCloseTheBreaker: the breaker opens on a hung Redis and closes
// on the ProbeSuccesses-th (2nd) successful probe in a row once Redis
// answers — counted in the prober's ticks, which the test gives one by one
// instead of waiting for them.
func TestProbesCloseTheBreaker(t *testing.T) {
	srv := redistest.Start(t)
	ticks := make(chan time.Time)
	fo, l := newFailoverWith(t, func(_ *sredis.Config, f *failover.Config) {
		f.Tick = func(d time.Duration) (<-chan time.Time, func()) {
			if d != f.ProbeInterval {
				t.Errorf("Tick(%v), want only the probe interval %v", d, f.ProbeInterval)
			}
			return ticks, func() {}
		}
	}, srv.Addr())
	defer fo.Close()
	ctx := context.Background()
	req := limiter.Request{User: "u", Method: "GET", Path: "/api/orders"}
	if d, err := l.Check(ctx, &req); err != nil || d.Origin != limiter.OriginStore {
		t.Fatalf("before the fault: %+v, %v; want a decision from Redis", d, err)
	}
	srv.Pause()
	// One call: it goes overdue, the probe gets no answer, the breaker
	// opens and the call is answered locally.
	if d, err := l.Check(ctx, &req); err != nil || d.Origin != limiter.OriginLocalFallback {
		t.Fatalf("Redis hung: %+v, %v; want the local fallback's answer", d, err)
	}
	if st, _ := fo.State(); st != failover.Open {
		t.Fatalf("breaker %s after a call Redis left unanswered, want open", st)
	}
	srv.Resume()
	// Ticks one at a time, the state read for 200 ms after each (a probe
	// takes one round trip to a local Redis; the state is never read right
	// after a tick as if its probe were done). The first probe may join
	// the one the hung call started, which the pause can fail; so the test
	// asks that the breaker close at a tick after a tick it stayed open
	// through — not at the first successful probe.
	closedAt := 0
	for n := 1; n <= 6 && closedAt == 0; n++ {
		ticks <- time.Now() // returns once the prober took it
		for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			if st, _ := fo.State(); st == failover.Closed {
				closedAt = n
				break
			}
		}
	}
	if closedAt < 2 {
		t.Fatalf("breaker closed at tick %d after Redis came back, want at the second successful probe (tick 2 or 3), after staying open through one", closedAt)
	}
	if d, err := l.Check(ctx, &req); err != nil || d.Origin != limiter.OriginStore {
		t.Fatalf("after recovery: %+v, %v; want a decision from Redis", d, err)
	}
}

// TestScriptRunsOutliveTheClient: the script runs and keys the shared
// store counted are kept when the breaker drops its connections (a probe
// that times out on a hung Redis) and connect makes a new store, so that
// sluice_store_script_runs_total and _keys_total only ever rise.
func TestScriptRunsOutliveTheClient(t *testing.T) {
	srv, fo, l := startFailover(t, nil)
	ctx := context.Background()
	check := func(user string) {
		l.Check(ctx, &limiter.Request{User: user, Method: "GET", Path: "/api/orders"}) //nolint:errcheck
	}
	for i := range 5 {
		check(fmt.Sprint("runs-", i))
	}
	runs, keys := fo.ScriptRuns()
	stats, err := srv.Do("info", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stats, "cmdstat_fcall:calls=5,") || runs != 5 || keys < runs {
		fcalls := "no FCALL"
		if i := strings.Index(stats, "cmdstat_fcall:"); i >= 0 {
			fcalls, _, _ = strings.Cut(stats[i:], ",")
		}
		t.Fatalf("5 checks one after another: ScriptRuns() = %d, %d; the server: %s; want 5 runs (FCALLs) of one key or more each", runs, keys, fcalls)
	}
	srv.Pause()
	for start := time.Now(); time.Since(start) < 1500*time.Millisecond; time.Sleep(5 * time.Millisecond) {
		check("runs-outage")
	}
	srv.Resume()
	for start := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		if st, _ := fo.State(); st == failover.Closed {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("breaker not closed 5 s after Redis answered again")
		}
	}
	check("runs-after")
	if r, k := fo.ScriptRuns(); r <= runs || k <= keys {
		t.Fatalf("after the reconnect: ScriptRuns() = %d, %d; want more than the %d, %d counted before it", r, k, runs, keys)
	}
}
