package failover_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/limiter"
)

// pauseSelf stops this process with SIGSTOP after delay and continues it
// after d, from a shell of its own: the whole instance — its callers, its
// timers, its reads of Redis's answers — stops as under a debugger, a VM's
// steal or a machine that gives it no CPU, while Redis keeps answering.
func pauseSelf(t *testing.T, delay, d time.Duration) *exec.Cmd {
	t.Helper()
	script := fmt.Sprintf("sleep %.3f; kill -STOP %d; sleep %.3f; kill -CONT %d",
		delay.Seconds(), os.Getpid(), d.Seconds(), os.Getpid())
	cmd := exec.Command("sh", "-c", script)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the pause: %v", err)
	}
	t.Cleanup(func() { exec.Command("kill", "-CONT", strconv.Itoa(os.Getpid())).Run() })
	return cmd
}

// TestPausedProcessDecidesOnRedis: an instance stopped for 1.5 s (longer
// than MaxWait) with calls out to a healthy Redis answers each of them
// with Redis's decision when it runs again. Its wall clock jumped, but
// Redis was never unreachable: the answers were in the sockets.
func TestPausedProcessDecidesOnRedis(t *testing.T) {
	_, fo, l := startFailover(t, nil)
	ctx := context.Background()
	for range 20 {
		if d, err := l.Check(ctx, &limiter.Request{User: "warm", Method: "GET", Path: "/api/x"}); err != nil || d.Origin != limiter.OriginStore {
			t.Fatalf("warm-up: %+v, %v; want a decision from Redis", d, err)
		}
	}
	var (
		local, total atomic.Int64
		stop         atomic.Bool
		wg           sync.WaitGroup
	)
	deadline := time.Now().Add(30 * time.Second)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load() && time.Now().Before(deadline); i++ {
				d, err := l.Check(ctx, &limiter.Request{User: fmt.Sprintf("p-%d-%d", w, i%50), Method: "GET", Path: "/api/orders"})
				total.Add(1)
				if err != nil || d.Origin != limiter.OriginStore {
					local.Add(1)
				}
			}
		}()
	}
	pause := pauseSelf(t, 300*time.Millisecond, 1500*time.Millisecond)
	pause.Wait()
	time.Sleep(500 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	opened, overdue, probes, failed := fo.BreakerCounts()
	t.Logf("%d decisions, %d not by Redis; breaker: %d openings, %d calls overdue, %d probes, %d failed",
		total.Load(), local.Load(), opened, overdue, probes, failed)
	if local.Load() != 0 || opened != 0 {
		t.Errorf("after a 1.5 s pause of this process, Redis healthy: %d of %d decisions not by Redis, %d breaker openings; want 0 and 0",
			local.Load(), total.Load(), opened)
	}
}
