package redis_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/algorithm/conformance"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/limiter"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// TestDifferentialBatched drives many buckets at once, in lockstep: at each
// instant every goroutine makes one call on its own bucket, so the calls
// share script runs (the batches of a standalone server), and each decision
// must still be the Go algorithm's.
func TestDifferentialBatched(t *testing.T) {
	for _, path := range scriptPaths {
		t.Run(path.command, func(t *testing.T) {
			srv := redistest.Start(t)
			var clock atomic.Int64
			s := openStore(t, func(c *sredis.Config) { c.Clock = clock.Load; c.DenialCache = false; c.Evalsha = path.evalsha }, srv.Addr())
			checkPath(t, s, path.command)
			const workers, steps = 40, 60
			r := rand.New(rand.NewPCG(3, 5))
			type bucket struct {
				p   algorithm.Params
				st  algorithm.State
				rng *rand.Rand
			}
			bs := make([]*bucket, workers)
			for w := range bs {
				k := algorithm.Kinds[w%len(algorithm.Kinds)]
				p := algorithm.Params{Kind: k, Limit: int64(1 + r.IntN(20)), Window: []int64{conformance.Second, conformance.Minute, conformance.Hour}[r.IntN(3)]}
				if k == algorithm.TokenBucket || k == algorithm.LeakyBucket {
					p.Burst = int64(r.IntN(10))
				}
				bs[w] = &bucket{p: p, rng: rand.New(rand.NewPCG(uint64(w), 9))}
			}
			now := conformance.Base + r.Int64N(conformance.Day)
			runs0, _ := scriptCalls(t, srv)
			for step := range steps {
				now += r.Int64N(conformance.Second / 2)
				clock.Store(now)
				var wg sync.WaitGroup
				errs := make(chan error, workers)
				for w, b := range bs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						cost := 1 + b.rng.Int64N(3)
						want, ns := algorithm.Apply(b.p, b.st, now, cost)
						if want.Allowed {
							b.st = ns
						}
						res := make([]algorithm.Result, 1)
						op := limiter.Op{Client: fmt.Sprintf("user:batched-%d", w), Rule: "r", Params: b.p, Cost: cost}
						if _, err := s.Take(context.Background(), []limiter.Op{op}, res); err != nil {
							errs <- err
							return
						}
						got := res[0]
						got.Changed, want.Changed = false, false
						if got != want {
							errs <- fmt.Errorf("step %d worker %d %+v cost %d: lua %+v, go %+v", step, w, b.p, cost, got, want)
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Fatal(err)
				}
			}
			runs1, _ := scriptCalls(t, srv)
			runs := runs1 - runs0
			t.Logf("%d decisions in %d script runs", workers*steps, runs)
		})
	}
}

// TestExactUnderConcurrency: 64 goroutines on one user, each call also
// keyed by one of two ips (a second client in the same call). On a
// standalone server the call is one script, all or nothing: exactly the
// ips' 2 × 20 calls pass, and the user's bucket (limit 50) is charged for
// exactly those.
func TestExactUnderConcurrency(t *testing.T) {
	srv := redistest.Start(t)
	for _, k := range algorithm.Kinds {
		t.Run(k.String(), func(t *testing.T) {
			var clock atomic.Int64
			clock.Store(conformance.Base + 30*conformance.Minute)
			s := openStore(t, func(c *sredis.Config) { c.Clock = clock.Load; c.DenialCache = false }, srv.Addr())
			user := "user:exact-" + k.String()
			userP, ipP := paramsOf(k, 50, conformance.Hour), paramsOf(k, 20, conformance.Hour)
			if k == algorithm.LeakyBucket {
				userP.Burst, ipP.Burst = 49, 19
			}
			ops := func(ip string) []limiter.Op {
				return []limiter.Op{
					{Client: user, Rule: "per-user", Params: userP, Cost: 1},
					{Client: "ip:" + ip + "-" + k.String(), Rule: "per-ip", Params: ipP, Cost: 1},
				}
			}
			got := takeConcurrently(t, s, 64, 30, func(g int) []limiter.Op { return ops([]string{"a", "b"}[g%2]) })
			if got != 40 {
				t.Fatalf("allowed %d calls, want 40 (two ips × 20)", got)
			}
			res, _ := take(t, s, ops("c")...)
			if !res[0].Allowed || res[0].Remaining != 50-40-1 {
				t.Fatalf("user after the run = %+v, want allowed, remaining %d", res[0], 50-40-1)
			}
		})
	}
}

// TestAbandonedCalls: callers whose deadline passes while the server hangs
// get their context's error at once; their queued calls are dropped, and
// the store decides normally once the server answers again.
func TestAbandonedCalls(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, func(c *sredis.Config) { c.DenialCache = false }, srv.Addr())
	op := func(i int) []limiter.Op {
		return []limiter.Op{{Client: fmt.Sprintf("user:abandoned-%d", i), Rule: "r",
			Params: paramsOf(algorithm.TokenBucket, 10, conformance.Hour), Cost: 1}}
	}
	take(t, s, op(0)...)
	srv.Pause()
	var wg sync.WaitGroup
	var timedOut atomic.Int64
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := s.Take(ctx, op(i), make([]algorithm.Result, 1))
			// The deadline shows as the context's error, or as the
			// connection's own i/o timeout when the client had set the
			// context's deadline on the socket.
			if (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)) && time.Since(start) < 2*time.Second {
				timedOut.Add(1)
			} else {
				t.Logf("call %d: %v after %v", i, err, time.Since(start))
			}
		}()
	}
	wg.Wait()
	srv.Resume()
	if got := timedOut.Load(); got != 40 {
		t.Fatalf("%d of 40 calls ended with their deadline on a hung server, want 40", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for i := 100; ; i++ {
		res := make([]algorithm.Result, 1)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := s.Take(ctx, op(i), res)
		cancel()
		if err == nil && res[0].Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decision 10 s after the server resumed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCanceledCallReturns: a caller that gives up (its ctx is canceled, as
// the failover store does to every waiting call when its breaker opens)
// returns at once, even when its call is the one that carries the script
// run and the run's deadline — the latest of its calls' — is far off.
func TestCanceledCallReturns(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, func(c *sredis.Config) { c.DenialCache = false }, srv.Addr())
	op := []limiter.Op{{Client: "user:canceled", Rule: "r", Params: paramsOf(algorithm.TokenBucket, 10, conformance.Hour), Cost: 1}}
	take(t, s, op...)
	srv.Pause()
	defer srv.Resume()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err := s.Take(ctx, op, make([]algorithm.Result, 1))
	if took := time.Since(start); !errors.Is(err, context.Canceled) || took > 500*time.Millisecond {
		t.Fatalf("Take canceled after 50 ms on a hung server (deadline 10 s) = %v after %v, want context.Canceled at once", err, took)
	}
}
