package redis_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/testkit/conformance"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
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
			s := openStore(t, func(c *sredis.Config) { c.Clock = clock.Load; c.NoDenialCache = true; c.Evalsha = path.evalsha }, srv.Addr())
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
				k := algorithm.Kinds()[w%len(algorithm.Kinds())]
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
					wg.Go(func() {
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
					})
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

// TestDifferentialBatchedMixed is TestDifferentialBatched with calls of
// every shape in one run: calls of one key and of two (the second keyed
// by another client), shadow ops, and rules of whole-µs tokens (take.lua's
// shortcut for a call of one such key) beside rules whose tokens are a
// fraction of a µs. A call passes when none of its non-shadow ops denies;
// then its ops that allowed are taken, and otherwise only the state a
// denial changed (a clamped debt) is kept. Each op's result must be the Go
// algorithm's on its bucket.
func TestDifferentialBatchedMixed(t *testing.T) {
	for _, path := range scriptPaths {
		t.Run(path.command, func(t *testing.T) {
			clock, s := startPathStore(t, path.evalsha, path.command)
			const workers, steps = 48, 80
			r := rand.New(rand.NewPCG(21, 8))
			type bucket struct {
				p  algorithm.Params
				st algorithm.State
			}
			type worker struct {
				user, ip *bucket
				rng      *rand.Rand
			}
			draw := func(w int) *bucket {
				p := algorithm.Params{Kind: algorithm.TokenBucket,
					Limit:  []int64{1, 4, 7, 10, 20}[r.IntN(5)],
					Window: []int64{conformance.Second, 3 * conformance.Second, conformance.Minute}[r.IntN(3)]}
				if w%4 == 3 { // another algorithm now and then
					p.Kind = algorithm.Kinds()[r.IntN(len(algorithm.Kinds()))]
				}
				if (p.Kind == algorithm.TokenBucket || p.Kind == algorithm.LeakyBucket) && r.IntN(2) == 0 {
					p.Burst = int64(1 + r.IntN(10))
				}
				return &bucket{p: p}
			}
			ws := make([]*worker, workers)
			for w := range ws {
				ws[w] = &worker{user: draw(w), ip: draw(w), rng: rand.New(rand.NewPCG(uint64(w), 31))}
			}
			now := conformance.Base + r.Int64N(conformance.Day)
			wholeOne := 0
			for step := range steps {
				now += r.Int64N(conformance.Second / 3)
				clock.Store(now)
				var wg sync.WaitGroup
				errs := make(chan error, workers)
				var mu sync.Mutex
				for w, wk := range ws {
					wg.Go(func() {
						bs := []*bucket{wk.user}
						ops := []limiter.Op{{Client: fmt.Sprintf("user:mixed-%d", w), Rule: "r", Params: wk.user.p, Cost: 1 + wk.rng.Int64N(3)}}
						if wk.rng.IntN(3) == 0 {
							bs = append(bs, wk.ip)
							ops = append(ops, limiter.Op{Client: fmt.Sprintf("ip:mixed-%d", w), Rule: "q", Params: wk.ip.p, Cost: 1 + wk.rng.Int64N(2)})
						}
						if wk.rng.IntN(5) == 0 {
							ops[wk.rng.IntN(len(ops))].Shadow = true
						}
						if len(ops) == 1 && !ops[0].Shadow && ops[0].Params.Kind == algorithm.TokenBucket && ops[0].Params.Window%ops[0].Params.Limit == 0 {
							mu.Lock()
							wholeOne++
							mu.Unlock()
						}
						want := make([]algorithm.Result, len(ops))
						next := make([]algorithm.State, len(ops))
						pass := true
						for i, op := range ops {
							want[i], next[i] = algorithm.Apply(op.Params, bs[i].st, now, op.Cost)
							if !want[i].Allowed && !op.Shadow {
								pass = false
							}
						}
						res := make([]algorithm.Result, len(ops))
						if _, err := s.Take(context.Background(), ops, res); err != nil {
							errs <- err
							return
						}
						for i := range ops {
							if (pass && want[i].Allowed) || (!want[i].Allowed && want[i].Changed) {
								bs[i].st = next[i]
							}
							got := res[i]
							got.Changed, want[i].Changed = false, false
							if got != want[i] {
								errs <- fmt.Errorf("step %d worker %d op %d of %d %+v cost %d shadow %v: lua %+v, go %+v", step, w, i, len(ops), ops[i].Params, ops[i].Cost, ops[i].Shadow, got, want[i])
							}
						}
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Fatal(err)
				}
			}
			if wholeOne == 0 {
				t.Fatal("no call of one whole-µs token bucket: the shortcut was not exercised")
			}
			t.Logf("%d calls, %d of one whole-µs token bucket", workers*steps, wholeOne)
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
	for _, k := range algorithm.Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			_, s := openClocked(t, nil, srv.Addr())
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
	s := openStore(t, func(c *sredis.Config) { c.NoDenialCache = true }, srv.Addr())
	op := func(i int) []limiter.Op {
		return []limiter.Op{{Client: fmt.Sprintf("user:abandoned-%d", i), Rule: "r",
			Params: paramsOf(algorithm.TokenBucket, 10, conformance.Hour), Cost: 1}}
	}
	take(t, s, op(0)...)
	srv.Pause()
	var wg sync.WaitGroup
	var timedOut atomic.Int64
	for i := range 40 {
		wg.Go(func() {
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
		})
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
	s := openStore(t, func(c *sredis.Config) { c.NoDenialCache = true }, srv.Addr())
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

// TestGroupCommit: a call made while a run is out waits for it and goes
// in the next run with the calls made meanwhile, until BatchFill keys are
// queued, when another run goes at once; a call made with no run out goes
// at once. A's run is held out by a paused server while the others call.
func TestGroupCommit(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, func(c *sredis.Config) { c.NoDenialCache = true }, srv.Addr())
	fill := sredis.DefaultConfig().BatchFill
	take(t, s, waitOp("user:group-warm")...)
	// until waits for the batcher to reach a state: runs out and keys
	// queued.
	until := func(t *testing.T, inflight, queued int) {
		t.Helper()
		for start := time.Now(); ; time.Sleep(time.Millisecond) {
			i, q := sredis.BatchState(s)
			if i == inflight && q == queued {
				return
			}
			if time.Since(start) > 10*time.Second {
				t.Fatalf("batcher: %d runs out and %d keys queued after 10 s, want %d and %d", i, q, inflight, queued)
			}
		}
	}
	for _, tt := range []struct {
		name     string
		calls    int // made while A's run is out
		inflight int // then runs out
		queued   int // and keys queued
		runs     int64
		why      string
	}{
		{"few", 5, 1, 5, 2, "A's, then the five in one run"},
		{"fill", fill + 4, 2, 4, 3, "A's, one run of BatchFill keys, then the other four in one"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := commandCalls(t, srv, "fcall")
			var wg sync.WaitGroup
			call := func(name string) {
				res := make([]algorithm.Result, 1)
				if _, err := s.Take(context.Background(), waitOp("user:group-"+tt.name+"-"+name), res); err != nil || !res[0].Allowed {
					t.Errorf("call %s: %+v, %v; want allowed", name, res[0], err)
				}
			}
			srv.Pause()
			defer srv.Resume() // on a failure too (SIGCONT to a running server does nothing)
			wg.Go(func() { call("a") })
			until(t, 1, 0) // A's run is out
			for i := range tt.calls {
				wg.Go(func() { call(strconv.Itoa(i)) })
			}
			until(t, tt.inflight, tt.queued) // all queued, or sent by the BatchFill-th key
			srv.Resume()
			wg.Wait()
			if runs := commandCalls(t, srv, "fcall") - before; runs != tt.runs {
				t.Fatalf("%d calls made while a run was out: %d script runs, want %d (%s)", tt.calls, runs, tt.runs, tt.why)
			}
		})
	}
	t.Run("lone", func(t *testing.T) {
		before := commandCalls(t, srv, "fcall")
		for i := range 10 {
			take(t, s, waitOp("user:group-lone-"+strconv.Itoa(i))...)
		}
		if runs := commandCalls(t, srv, "fcall") - before; runs != 10 {
			t.Fatalf("10 calls one after another: %d script runs, want 10 (none waits for others)", runs)
		}
	})
}

// waitOp is a call of one token-bucket key of 10 an hour for client.
func waitOp(client string) []limiter.Op {
	return []limiter.Op{{Client: client, Rule: "r", Params: paramsOf(algorithm.TokenBucket, 10, conformance.Hour), Cost: 1}}
}

// TestBatchWaitBounds: New refuses a window below 0 or above MaxBatchWait.
func TestBatchWaitBounds(t *testing.T) {
	srv := redistest.Start(t)
	for _, d := range []time.Duration{-time.Microsecond, sredis.MaxBatchWait + time.Microsecond, time.Second} {
		cfg := sredis.DefaultConfig()
		cfg.Addrs, cfg.BatchWait = []string{srv.Addr()}, d
		s, err := sredis.New(context.Background(), cfg)
		if err == nil {
			s.Close()
			t.Fatalf("New with BatchWait %s: no error", d)
		}
		if !strings.Contains(err.Error(), "BatchWait "+d.String()) {
			t.Errorf("New with BatchWait %s: %v, want an error naming BatchWait and the value", d, err)
		}
	}
	openStore(t, func(c *sredis.Config) { c.BatchWait = sredis.MaxBatchWait }, srv.Addr())
}

// TestBatchWaitSharesRun: calls made within one window go in one script
// run, and the run goes as soon as they fill MaxBatch keys, not at the
// window's end.
func TestBatchWaitSharesRun(t *testing.T) {
	srv := redistest.Start(t)
	const n = 8
	s := openStore(t, func(c *sredis.Config) { c.NoDenialCache = true; c.MaxBatch = n }, srv.Addr())
	take(t, s, waitOp("user:share-warm")...) // loads the library, opens the connection
	sredis.SetBatchWait(s, time.Minute)
	before := commandCalls(t, srv, "fcall")
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			res := make([]algorithm.Result, 1)
			if _, err := s.Take(context.Background(), waitOp(fmt.Sprintf("user:share-%d", i)), res); err != nil {
				errs <- err
			} else if !res[0].Allowed || res[0].Remaining != 9 {
				errs <- fmt.Errorf("call %d: %+v, want allowed, 9 remaining", i, res[0])
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("%d calls filling a run of %d keys took %v: the run waited for its window (a minute)", n, n, took)
	}
	if runs := commandCalls(t, srv, "fcall") - before; runs != 1 {
		t.Fatalf("%d calls in one window made %d script runs, want 1", n, runs)
	}
}

// TestBatchWaitLoneCall: a call alone in its window goes when the window
// ends, in a run of its own.
func TestBatchWaitLoneCall(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, func(c *sredis.Config) { c.NoDenialCache = true; c.BatchWait = sredis.MaxBatchWait }, srv.Addr())
	take(t, s, waitOp("user:lone-warm")...)
	for i := range 3 {
		before := commandCalls(t, srv, "fcall")
		start := time.Now()
		res, _ := take(t, s, waitOp(fmt.Sprintf("user:lone-%d", i))...)
		took := time.Since(start)
		if !res[0].Allowed || res[0].Remaining != 9 {
			t.Fatalf("lone call %d: %+v, want allowed, 9 remaining", i, res[0])
		}
		if took < sredis.MaxBatchWait || took > 5*time.Second {
			t.Fatalf("lone call %d took %v, want its window (%v) and then its run", i, took, sredis.MaxBatchWait)
		}
		if runs := commandCalls(t, srv, "fcall") - before; runs != 1 {
			t.Fatalf("lone call %d made %d script runs, want 1", i, runs)
		}
	}
}

// TestBatchWaitExact: concurrent callers on one limit with a window get
// exactly the limit, whatever share runs, and a denied call takes nothing
// from its other key (the user's count after the run).
func TestBatchWaitExact(t *testing.T) {
	srv := redistest.Start(t)
	for _, wait := range []time.Duration{250 * time.Microsecond, time.Millisecond} {
		t.Run(wait.String(), func(t *testing.T) {
			_, s := openClocked(t, func(c *sredis.Config) { c.BatchWait = wait }, srv.Addr())
			user := "user:wait-exact-" + wait.String()
			got := takeConcurrently(t, s, 64, 10, func(g int) []limiter.Op {
				return []limiter.Op{
					{Client: user, Rule: "per-user", Params: paramsOf(algorithm.TokenBucket, 50, conformance.Hour), Cost: 1},
					{Client: fmt.Sprintf("ip:%d-%s", g%2, wait), Rule: "per-ip", Params: paramsOf(algorithm.TokenBucket, 20, conformance.Hour), Cost: 1},
				}
			})
			if got != 40 {
				t.Fatalf("allowed %d calls, want 40 (two ips × 20)", got)
			}
			res, _ := take(t, s, limiter.Op{Client: user, Rule: "per-user", Params: paramsOf(algorithm.TokenBucket, 50, conformance.Hour), Cost: 1})
			if !res[0].Allowed || res[0].Remaining != 50-40-1 {
				t.Fatalf("user after the run = %+v, want allowed, remaining %d", res[0], 50-40-1)
			}
		})
	}
}

// TestBatchWaitCanceled: a caller whose context ends while its call waits
// in a window returns at once, and its call is never sent: it takes
// nothing.
func TestBatchWaitCanceled(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, func(c *sredis.Config) { c.NoDenialCache = true }, srv.Addr())
	take(t, s, waitOp("user:cancel-warm")...)
	sredis.SetBatchWait(s, 2*time.Second)
	before := commandCalls(t, srv, "fcall")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	start := time.Now()
	_, err := s.Take(ctx, waitOp("user:cancel"), make([]algorithm.Result, 1))
	if took := time.Since(start); !errors.Is(err, context.Canceled) || took > time.Second {
		t.Fatalf("Take canceled after 20 ms in a 2 s window = %v after %v, want context.Canceled at once", err, took)
	}
	time.Sleep(2500 * time.Millisecond) // the window ends, with nothing to send
	if runs := commandCalls(t, srv, "fcall") - before; runs != 0 {
		t.Fatalf("a call canceled in its window made %d script runs, want 0", runs)
	}
	res, _ := take(t, s, waitOp("user:cancel")...)
	if !res[0].Allowed || res[0].Remaining != 9 {
		t.Fatalf("the next call = %+v, want allowed, 9 remaining: the canceled call took nothing", res[0])
	}
}

// TestBatchWaitReturningRun: a run that comes back while a window is open
// leaves the queued calls to the window's run. A's run is held out by a
// paused server while B opens a second window; A's run comes back before
// C joins B's window, and B and C go in one run.
func TestBatchWaitReturningRun(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, func(c *sredis.Config) { c.NoDenialCache = true }, srv.Addr())
	take(t, s, waitOp("user:return-warm")...)
	const wait = time.Second
	sredis.SetBatchWait(s, wait)
	before := commandCalls(t, srv, "fcall")
	var wg sync.WaitGroup
	call := func(name string) {
		defer wg.Done()
		res := make([]algorithm.Result, 1)
		if _, err := s.Take(context.Background(), waitOp("user:return-"+name), res); err != nil || !res[0].Allowed {
			t.Errorf("call %s: %+v, %v; want allowed", name, res[0], err)
		}
	}
	srv.Pause()
	wg.Add(1)
	go call("a")              // opens a window; its run goes at 1 s and waits for the server
	time.Sleep(wait + wait/4) // 1.25 s: A's run is out
	wg.Add(1)
	go call("b") // opens the second window, until 2.25 s
	time.Sleep(wait / 4)
	srv.Resume() // 1.5 s: A's run comes back
	time.Sleep(wait / 4)
	wg.Add(1)
	go call("c") // 1.75 s: joins B's window
	wg.Wait()
	if runs := commandCalls(t, srv, "fcall") - before; runs != 2 {
		t.Fatalf("A, then B and C in one window: %d script runs, want 2", runs)
	}
}

// TestFlushDelayRefused: a FlushDelay out of range is refused, the error
// naming the field.
func TestFlushDelayRefused(t *testing.T) {
	for _, d := range []time.Duration{-time.Microsecond, time.Second + 1} {
		cfg := sredis.DefaultConfig()
		cfg.Addrs = []string{"127.0.0.1:1"}
		cfg.FlushDelay = d
		s, err := sredis.New(context.Background(), cfg)
		if err == nil {
			s.Close()
			t.Fatalf("New with FlushDelay %s: no error", d)
		}
		if !strings.Contains(err.Error(), "FlushDelay") {
			t.Fatalf("New with FlushDelay %s: %v, want an error naming FlushDelay", d, err)
		}
	}
}

// TestFlushDelay: with FlushDelay set, a call made while another is in
// flight on its connection waits up to FlushDelay before it is written;
// a call made when nothing is in flight is written at once; and the calls
// are decided as without it. Without FlushDelay every call is written at
// once.
//
// The server is stopped (SIGSTOP) while one call is out, so that the
// calls after it find a reply outstanding; it resumes 50 ms later. The
// client has up to four connections (by GOMAXPROCS) and picks one per
// call at random: of the eight calls made while the first is out, at most
// one per other connection (the first on a connection with nothing out)
// is written at once.
func TestFlushDelay(t *testing.T) {
	const delay = 800 * time.Millisecond
	srv := redistest.Start(t)
	p := paramsOf(algorithm.TokenBucket, 100, conformance.Hour)
	for _, tt := range []struct {
		name    string
		delay   time.Duration
		minLate int // calls answered after delay/2 or later, at least
		maxLate int // and at most
	}{
		{"without", 0, 0, 0},
		// At least one: on a loaded machine a call may start only after the
		// server resumed and find nothing outstanding, so how many are held
		// is not fixed; without FlushDelay none ever is.
		{"with", delay, 1, 8},
	} {
		t.Run(tt.name, func(t *testing.T) {
			do(t, srv, "flushall")
			s := openStore(t, func(c *sredis.Config) {
				c.FlushDelay, c.MaxBatch, c.NoDenialCache = tt.delay, 1, true
			}, srv.Addr())
			op := func(user string) []limiter.Op {
				return []limiter.Op{{Client: user, Rule: "r", Params: p, Cost: 1}}
			}

			// Calls made together, while the server is stopped, so that
			// each connection has calls waiting: the client then writes
			// through its background writer, which alone applies
			// FlushDelay (a lone caller on an idle connection writes for
			// itself).
			srv.Pause()
			var warm sync.WaitGroup
			warmErrs := make(chan error, 64)
			for i := range 64 {
				warm.Go(func() {
					res := make([]algorithm.Result, 1)
					if _, err := s.Take(context.Background(), op("user:warm-"+strconv.Itoa(i)), res); err != nil {
						warmErrs <- err
					}
				})
			}
			time.Sleep(20 * time.Millisecond)
			srv.Resume()
			warm.Wait()
			close(warmErrs)
			for err := range warmErrs {
				t.Fatal(err)
			}

			// One call at a time: written at once whatever FlushDelay says.
			start := time.Now()
			for range 5 {
				take(t, s, op("user:seq")...)
			}
			if el := time.Since(start); el >= delay/2 {
				t.Fatalf("5 calls one after another took %s, want < %s (nothing was in flight)", el, delay/2)
			}

			srv.Pause()
			resumed := false
			defer func() {
				if !resumed {
					srv.Resume()
				}
			}()
			t0 := time.Now()
			var wg sync.WaitGroup
			var late atomic.Int64
			errs := make(chan error, 9)
			call := func(user string) {
				defer wg.Done()
				res := make([]algorithm.Result, 1)
				if _, err := s.Take(context.Background(), op(user), res); err != nil {
					errs <- err
					return
				}
				if !res[0].Allowed || res[0].Remaining != 99 {
					t.Errorf("%s: %+v, want allowed, 99 left", user, res[0])
				}
				if time.Since(t0) >= delay/2 {
					late.Add(1)
				}
			}
			wg.Add(1)
			go call("user:first")
			time.Sleep(20 * time.Millisecond)
			for _, u := range []string{"user:a", "user:b", "user:c", "user:d", "user:e", "user:f", "user:g", "user:h"} {
				wg.Add(1)
				go call(u)
			}
			time.Sleep(30 * time.Millisecond)
			srv.Resume()
			resumed = true
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if n := int(late.Load()); n < tt.minLate || n > tt.maxLate {
				t.Fatalf("%d of 9 calls answered %s or more after the first was sent, want %d to %d", n, delay/2, tt.minLate, tt.maxLate)
			}
		})
	}
}

// TestScriptRuns: ScriptRuns counts every script run the store sends and
// the keys it decides, alone or shared, as the server counts its FCALLs.
func TestScriptRuns(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, func(c *sredis.Config) { c.NoDenialCache = true }, srv.Addr())
	runs0, keys0 := s.ScriptRuns()
	fcalls0 := commandCalls(t, srv, "fcall")
	two := func(user string) []limiter.Op {
		return []limiter.Op{
			{Client: user, Rule: "a", Params: paramsOf(algorithm.TokenBucket, 10, conformance.Hour), Cost: 1},
			{Client: user, Rule: "b", Params: paramsOf(algorithm.FixedWindow, 10, conformance.Hour), Cost: 1},
		}
	}
	for i := range 5 {
		take(t, s, two("user:runs-"+strconv.Itoa(i))...)
	}
	if runs, keys := s.ScriptRuns(); runs-runs0 != 5 || keys-keys0 != 10 {
		t.Fatalf("5 calls of two rules one after another: %d runs, %d keys; want 5, 10", runs-runs0, keys-keys0)
	}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 20 {
				if _, err := s.Take(context.Background(), two(fmt.Sprintf("user:runs-%d-%d", g, i)), make([]algorithm.Result, 2)); err != nil {
					t.Errorf("Take: %v", err)
				}
			}
		})
	}
	wg.Wait()
	runs, keys := s.ScriptRuns()
	if fcalls := commandCalls(t, srv, "fcall") - fcalls0; runs-runs0 != fcalls || keys-keys0 != 10+16*20*2 {
		t.Fatalf("then 320 calls from 16 goroutines: %d runs, %d keys; want the server's %d FCALLs and %d keys", runs-runs0, keys-keys0, fcalls, 10+16*20*2)
	}
	t.Logf("%d runs for %d keys", runs-runs0, keys-keys0)
}
