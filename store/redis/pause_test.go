package redis_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/limiter"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// TestPausedProcessReadsTheAnswer: a call out when this process is
// stopped for longer than the connection's write timeout (1 s) gets
// Redis's answer when the process runs again, whatever its context. A
// wall-clock deadline on the socket would end it with "i/o timeout"
// instead, after Redis took the tokens.
//
// The server is paused first, so that the call is surely out when this
// process stops (for 1.2 s). It continues either while this process is
// stopped (the answer waits in the socket: the old code lost it or not,
// as the runtime's timer and poller came first) or just after (the
// deadline has passed when the process runs again: always lost).
func TestPausedProcessReadsTheAnswer(t *testing.T) {
	for _, c := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"never ends", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }},
		{"can end", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }},
		{"deadline in 10 s", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 10*time.Second)
		}},
	} {
		for _, v := range []struct{ batched, inSocket, raw bool }{
			{batched: true}, {batched: false},
			{batched: true, raw: true}, // sluice serve's and gateway's socket calls
			{batched: true, inSocket: true}, {batched: false, inSocket: true},
		} {
			batched, inSocket := v.batched, v.inSocket
			if inSocket && c.name != "can end" {
				continue
			}
			t.Run(fmt.Sprintf("%s/batched=%v/raw=%v/answered-while-stopped=%v", c.name, batched, v.raw, inSocket), func(t *testing.T) {
				srv := redistest.Start(t)
				s := openStore(t, func(cfg *sredis.Config) {
					if !batched {
						cfg.MaxBatch = 1
					}
					cfg.RawIO = v.raw
				}, srv.Addr())
				op := limiter.Op{Client: "user:paused", Rule: "r", Params: algorithm.Params{Kind: algorithm.FixedWindow, Limit: 100, Window: int64(time.Minute)}, Cost: 1}
				// One caller at a time, as a process under little load.
				// The client spreads commands over a few connections at
				// random and dials each on first use: 64 calls dial them
				// all, so that the paused call does not wait on a
				// connection's handshake, which has a wall-clock
				// deadline of its own.
				for range 64 {
					take(t, s, op)
				}
				srv.Pause()
				t.Cleanup(srv.Resume)
				self := os.Getpid()
				script := fmt.Sprintf("sleep 0.3; kill -STOP %[1]d; sleep 1.2; kill -CONT %[1]d; sleep 0.05; kill -CONT %[2]d", self, srv.PID())
				if inSocket {
					script = fmt.Sprintf("sleep 0.3; kill -STOP %[1]d; kill -CONT %[2]d; sleep 1.2; kill -CONT %[1]d", self, srv.PID())
				}
				pause := exec.Command("sh", "-c", script)
				if err := pause.Start(); err != nil {
					t.Fatalf("start the pause: %v", err)
				}
				t.Cleanup(func() { exec.Command("kill", "-CONT", strconv.Itoa(self)).Run() })

				ctx, cancel := c.ctx()
				defer cancel()
				res := make([]algorithm.Result, 1)
				start := time.Now()
				_, err := s.Take(ctx, []limiter.Op{op}, res)
				took := time.Since(start)
				if werr := pause.Wait(); werr != nil {
					t.Fatalf("the pause: %v", werr)
				}
				if err != nil {
					t.Fatalf("a call out over a 1.2 s stop of this process: %v after %v; want Redis's answer", err, took)
				}
				if !res[0].Allowed || res[0].Remaining != 100-65 {
					t.Fatalf("the 65th call: %+v; want allowed with 35 left", res[0])
				}
			})
		}
	}
}
