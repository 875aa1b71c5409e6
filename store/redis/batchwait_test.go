package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
		s, err := sredis.New(cfg)
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
	s := openStore(t, func(c *sredis.Config) { c.DenialCache = false; c.MaxBatch = n }, srv.Addr())
	take(t, s, waitOp("user:share-warm")...) // loads the library, opens the connection
	sredis.SetBatchWait(s, time.Minute)
	before := commandCalls(t, srv, "fcall")
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := make([]algorithm.Result, 1)
			if _, err := s.Take(context.Background(), waitOp(fmt.Sprintf("user:share-%d", i)), res); err != nil {
				errs <- err
			} else if !res[0].Allowed || res[0].Remaining != 9 {
				errs <- fmt.Errorf("call %d: %+v, want allowed, 9 remaining", i, res[0])
			}
		}()
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
	s := openStore(t, func(c *sredis.Config) { c.DenialCache = false; c.BatchWait = sredis.MaxBatchWait }, srv.Addr())
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
			var clock atomic.Int64
			clock.Store(conformance.Base + 30*conformance.Minute)
			s := openStore(t, func(c *sredis.Config) { c.Clock = clock.Load; c.DenialCache = false; c.BatchWait = wait }, srv.Addr())
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
	s := openStore(t, func(c *sredis.Config) { c.DenialCache = false }, srv.Addr())
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
	s := openStore(t, func(c *sredis.Config) { c.DenialCache = false }, srv.Addr())
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
