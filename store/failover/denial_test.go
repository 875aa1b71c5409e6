package failover_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store/failover"
)

// TestDenialsOutliveTheClient: a caller Redis denied with a long wait stays
// denied through a whole outage — past the moment the breaker drops its
// connections (the probe that times out, or the third failed one) — and
// after the reconnect to a Redis that restarted empty, for kill -9 and
// SIGSTOP alike.
func TestDenialsOutliveTheClient(t *testing.T) {
	for _, tc := range []struct {
		name            string
		inject, restore func(*redistest.Server)
	}{
		{"kill", (*redistest.Server).Kill, (*redistest.Server).Restart},
		{"sigstop", (*redistest.Server).Pause, func(s *redistest.Server) { s.Resume(); s.Kill(); s.Restart() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			fo, l := newFailover(t, srv.Addr())
			defer fo.Close()
			ctx := context.Background()
			greedy := limiter.Request{User: "greedy", Method: "GET", Path: "/api/orders", Cost: openLimit / 2}
			for i := 0; ; i++ {
				d, err := l.Check(ctx, &greedy)
				if err != nil {
					t.Fatal(err)
				}
				if !d.Allowed {
					if d.Source != limiter.SourceStore || d.RetryAfter < 20*time.Second {
						t.Fatalf("denial from Redis: %+v, want source store with a wait of ~30 s", d)
					}
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
			tc.inject(srv)
			// Through the outage: the breaker opens, its probes fail and time
			// out, and it drops the connections; 1.5 s covers all of it.
			// Other callers' calls reach Redis, fail and open the breaker.
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
			for start := time.Now(); time.Since(start) < 1500*time.Millisecond; time.Sleep(5 * time.Millisecond) {
				others()
				denied("during the outage")
			}
			if st, _ := fo.State(); st == failover.Closed {
				t.Fatal("breaker still closed 1.5 s into the outage")
			}
			tc.restore(srv) // Redis is back, empty
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
			for range 20 {
				denied("after the reconnect, Redis empty")
			}
		})
	}
}
