package redis_test

import (
	"context"
	"strconv"
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

// TestFlushDelayRefused: a FlushDelay out of range is refused, the error
// naming the field.
func TestFlushDelayRefused(t *testing.T) {
	for _, d := range []time.Duration{-time.Microsecond, time.Second + 1} {
		cfg := sredis.DefaultConfig()
		cfg.Addrs = []string{"127.0.0.1:1"}
		cfg.FlushDelay = d
		s, err := sredis.New(cfg)
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
				c.FlushDelay, c.MaxBatch, c.DenialCache = tt.delay, 1, false
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
				warm.Add(1)
				go func() {
					defer warm.Done()
					res := make([]algorithm.Result, 1)
					if _, err := s.Take(context.Background(), op("user:warm-"+strconv.Itoa(i)), res); err != nil {
						warmErrs <- err
					}
				}()
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
