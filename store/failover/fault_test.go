package failover_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/failover"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// The fault tests run real redis-server processes and break them: kill -9,
// SIGSTOP, a restart that loses every key, a network path that goes silent
// (a TCP proxy in blackhole mode), and in a Redis Cluster the death of a
// master and the promotion of its replica. For each they check that every
// decision is answered, within 10 ms at p99 once the breaker is open; that
// fail-open rules allow up to the coarse local limit and no more and
// fail-closed rules deny; that no goroutines are left behind; and that
// decisions are back on the shared store within 2 s of Redis answering
// again, with the keys reappearing in Redis.

const (
	instances = 2 // fixed: the coarse limit is limit/2
	openLimit = 600
	// storeTimeout is the deadline of a call to Redis in these tests: above
	// the 5 ms default so that a machine busy with the rest of the test
	// suite does not trip the breaker when nothing is wrong.
	storeTimeout = 25 * time.Millisecond
)

var faultRules = &rules.Set{Rules: []rules.Rule{
	{ID: "open", Match: rules.Match{Endpoint: "GET /api/*"}, By: rules.ByUser, Limit: openLimit, Window: rules.Duration(time.Minute)},
	{ID: "closed", Match: rules.Match{Endpoint: "POST /pay"}, By: rules.ByUser, Limit: 1_000_000, Window: rules.Duration(time.Minute), FailureMode: rules.FailClosed},
}}

type sample struct {
	at      time.Time
	latency time.Duration
	source  limiter.Origin
	allowed bool
	closed  bool
	err     error
}

// settle returns the goroutine count and live heap after a GC.
func settle() (int, uint64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return runtime.NumGoroutine(), m.HeapAlloc
}

type fault struct {
	name      string
	burstUser string // a client whose buckets live where the fault is (cluster)
	probeUser string // another such client, for the recovery (cluster)
	inject    func()
	restore   func()
	// keyNode is where to look for the keys reappearing.
	exists func(key string) bool
}

func newFailover(t *testing.T, addrs ...string) (*failover.Store, *limiter.Limiter) {
	t.Helper()
	return newFailoverWith(t, nil, addrs...)
}

// newFailoverWith is newFailover with the Redis and failover configs
// changed by edit (nil: none), wired as the CLI wires them: one denial
// cache shared by every client connect makes, and asked while degraded.
func newFailoverWith(t *testing.T, edit func(*sredis.Config, *failover.Config), addrs ...string) (*failover.Store, *limiter.Limiter) {
	t.Helper()
	cfg := sredis.DefaultConfig()
	cfg.Addrs = addrs
	cfg.DialTimeout = 500 * time.Millisecond
	cfg.Denials = sredis.NewDenialCache()
	fcfg := failover.Config{Instances: instances, ProbeInterval: 100 * time.Millisecond, Timeout: storeTimeout, Logger: testLogger(), Denials: cfg.Denials}
	if edit != nil {
		edit(&cfg, &fcfg)
	}
	fo := failover.New(func(ctx context.Context) (failover.Primary, error) {
		s, err := sredis.New(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return s, nil
	}, fcfg)
	return fo, limitertest.Over(t, fo, faultRules)
}

// startFailover starts a redis-server and a failover store over it made by
// newFailoverWith (edit: nil for none), closed when the test ends.
func startFailover(t *testing.T, edit func(*sredis.Config, *failover.Config)) (*redistest.Server, *failover.Store, *limiter.Limiter) {
	t.Helper()
	srv := redistest.Start(t)
	fo, l := newFailoverWith(t, edit, srv.Addr())
	t.Cleanup(func() { fo.Close() })
	return srv, fo, l
}

// runFault drives steady load, injects the fault, checks the degraded
// behaviour, restores, and measures recovery. It returns a row of the
// fault table.
func runFault(t *testing.T, fo *failover.Store, l *limiter.Limiter, f fault) string {
	ctx := context.Background()
	// Warm up until 20 decisions in a row come from the shared store.
	for ok, start := 0, time.Now(); ok < 20; {
		d, err := l.Check(ctx, &limiter.Request{User: "warm", Method: "GET", Path: "/api/x"})
		if err == nil && d.Origin == limiter.OriginStore {
			ok++
		} else {
			ok = 0
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%s: no run of 20 decisions from the store in 10 s before the fault (last %+v, %v)", f.name, d, err)
		}
	}
	// The probes' own connection, as after the fault (through the
	// blackhole's proxy it is three goroutines of the test's).
	if err := fo.Primary().Probe(ctx, "warm"); err != nil {
		t.Fatalf("%s: probe before the fault: %v", f.name, err)
	}
	var (
		mu      sync.Mutex
		samples []sample
		stop    atomic.Bool
		wg      sync.WaitGroup
	)
	deadline := time.Now().Add(60 * time.Second) // the load stops by itself
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; !stop.Load() && time.Now().Before(deadline); i++ {
				closed := i%2 == 1
				req := limiter.Request{User: fmt.Sprintf("load-%d", w), Method: "GET", Path: "/api/orders"}
				if closed {
					req.Method, req.Path = "POST", "/pay"
				}
				start := time.Now()
				d, err := l.Check(ctx, &req)
				s := sample{at: start, latency: time.Since(start), source: d.Origin, allowed: d.Allowed, closed: closed, err: err}
				mu.Lock()
				samples = append(samples, s)
				mu.Unlock()
				time.Sleep(time.Millisecond)
			}
		}(w)
	}

	// Goroutines and heap with the load running, before the fault.
	time.Sleep(300 * time.Millisecond)
	goroutinesBefore, heapBefore := settle()
	injected := time.Now()
	f.inject()
	// Detection: the breaker opens.
	var opened time.Time
	for time.Since(injected) < 10*time.Second {
		if st, _ := fo.State(); st != failover.Closed {
			opened = time.Now()
			break
		}
		time.Sleep(time.Millisecond)
	}
	if opened.IsZero() {
		stop.Store(true)
		wg.Wait()
		t.Fatalf("%s: breaker did not open within 10 s", f.name)
	}
	detection := opened.Sub(injected)
	if detection > time.Second {
		t.Errorf("%s: breaker opened %v after the fault, want ≤ 1 s", f.name, detection)
	}

	// While degraded: a fresh client gets the coarse local limit and no more.
	burstUser := f.burstUser
	if burstUser == "" {
		burstUser = fmt.Sprintf("burst-%d", time.Now().UnixNano())
	}
	allowed := 0
	burstStart := time.Now()
	for i := 0; i < openLimit; i++ {
		d, err := l.Check(ctx, &limiter.Request{User: burstUser, Method: "GET", Path: "/api/orders"})
		if err != nil {
			t.Fatalf("%s: degraded decision error: %v", f.name, err)
		}
		if d.Allowed {
			allowed++
		}
		if d.Origin != limiter.OriginLocalFallback {
			t.Fatalf("%s: decision source %s while the breaker is open, want local_fallback", f.name, d.Origin)
		}
	}
	coarse := openLimit / instances
	refill := int(time.Since(burstStart).Seconds()*float64(coarse)/60) + 1
	if allowed < coarse || allowed > coarse+refill {
		t.Errorf("%s: fail-open rule allowed %d of %d calls, want the coarse local limit %d (+%d refill)", f.name, allowed, openLimit, coarse, refill)
	}
	time.Sleep(500 * time.Millisecond)

	// restore returns when Redis answers again (a restarted server answers
	// PING; a cluster has promoted the replica and agrees on it).
	f.restore()
	restored := time.Now()
	// Recovery: decisions for a new client come from the store, and its key
	// is in Redis.
	probeUser := f.probeUser
	if probeUser == "" {
		probeUser = fmt.Sprintf("probe-%d", time.Now().UnixNano())
	}
	var recovered time.Time
	for time.Since(restored) < 20*time.Second {
		cs := time.Now()
		d, err := l.Check(ctx, &limiter.Request{User: probeUser, Method: "GET", Path: "/api/orders"})
		if err == nil && d.Origin == limiter.OriginStore {
			recovered = time.Now()
			if l := testLogger(); l != nil {
				l.Debug("probe user on the store", "check_took", time.Since(cs))
			}
			break
		}
		if l := testLogger(); l != nil {
			st, reason := fo.State()
			l.Debug("probe user not on the store", "source", d.Origin.String(), "err", err, "breaker", st.String(), "reason", reason)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if recovered.IsZero() {
		stop.Store(true)
		wg.Wait()
		st, reason := fo.State()
		t.Fatalf("%s: not back on the shared store 20 s after Redis answered again (breaker %s: %s)", f.name, st, reason)
	}
	// The decision really went to Redis: its key is there.
	for start := time.Now(); !f.exists("rl:{user:" + probeUser + "}:open"); {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("%s: decisions back on the shared store but the key of %s is not in Redis", f.name, probeUser)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Goroutines and heap with the same load running, after recovery.
	time.Sleep(300 * time.Millisecond)
	goroutinesAfter, heapAfter := settle()
	stop.Store(true)
	wg.Wait()
	recovery := recovered.Sub(restored)
	if recovery > 2*time.Second {
		t.Errorf("%s: back on the shared store %v after Redis answered again, want ≤ 2 s", f.name, recovery)
	}

	// Every decision was answered; latencies after the breaker opened.
	var during []time.Duration
	errs, closedAllowed, closedDegraded := 0, 0, 0
	for _, s := range samples {
		if s.err != nil {
			errs++
			continue
		}
		// The degraded decisions' latency (on a cluster, the calls of
		// the healthy shards' callers go on to Redis meanwhile).
		if s.at.After(opened) && s.at.Before(restored) && s.source.Degraded() {
			during = append(during, s.latency)
		}
		// Fail-closed rules deny whenever the shared store was not asked.
		if s.closed && s.source.Degraded() {
			closedDegraded++
			if s.allowed {
				closedAllowed++
			}
		}
	}
	if errs > 0 {
		t.Errorf("%s: %d of %d decisions failed, want every one answered", f.name, errs, len(samples))
	}
	if closedAllowed > 0 || closedDegraded == 0 {
		t.Errorf("%s: fail-closed rule allowed %d of %d calls while degraded, want all denied", f.name, closedAllowed, closedDegraded)
	}
	slices.Sort(during)
	p99 := during[len(during)*99/100]
	if p99 > 10*time.Millisecond {
		t.Errorf("%s: p99 decision latency while degraded %v, want < 10 ms", f.name, p99)
	}

	// No goroutine or memory growth across the fault.
	// A few goroutines of slack: the client's connection pool need not be
	// the same size after a reconnect, and each script run in flight is a
	// goroutine (up to BatchConcurrency, 4); growth would show as many more.
	if goroutinesAfter > goroutinesBefore+8 {
		t.Errorf("%s: %d goroutines before the fault, %d after", f.name, goroutinesBefore, goroutinesAfter)
	}
	if heapAfter > heapBefore+16<<20 {
		t.Errorf("%s: heap %d KiB before the fault, %d KiB after", f.name, heapBefore>>10, heapAfter>>10)
	}
	row := fmt.Sprintf("| %s | %v | %v | %v (max %v, %d decisions) | fail-open: %d of %d allowed (coarse limit %d); fail-closed: %d of %d denied | %d → %d goroutines, %d → %d KiB heap |",
		f.name, detection.Round(time.Millisecond), recovery.Round(time.Millisecond), p99.Round(time.Microsecond),
		during[len(during)-1].Round(time.Microsecond), len(during), allowed, openLimit, coarse,
		closedDegraded-closedAllowed, closedDegraded, goroutinesBefore, goroutinesAfter, heapBefore>>10, heapAfter>>10)
	t.Log(row)
	return row
}

func exists(s *redistest.Server) func(string) bool {
	return func(key string) bool {
		out, err := s.Do("exists", key)
		return err == nil && strings.TrimSpace(out) == "1"
	}
}

func TestFaults(t *testing.T) {
	var table []string
	t.Run("kill", func(t *testing.T) {
		srv, fo, l := startFailover(t, nil)
		table = append(table, runFault(t, fo, l, fault{name: "kill -9", inject: srv.Kill, restore: srv.Restart, exists: exists(srv)}))
	})
	t.Run("sigstop", func(t *testing.T) {
		srv, fo, l := startFailover(t, nil)
		table = append(table, runFault(t, fo, l, fault{name: "SIGSTOP (hung server)", inject: srv.Pause, restore: srv.Resume, exists: exists(srv)}))
	})
	t.Run("blackhole", func(t *testing.T) {
		srv := redistest.Start(t)
		proxy := redistest.StartProxy(t, srv.Addr())
		fo, l := newFailover(t, proxy.Addr())
		defer fo.Close()
		table = append(table, runFault(t, fo, l, fault{name: "blackhole (silent TCP)",
			inject: func() { proxy.Blackhole(true) }, restore: func() { proxy.Blackhole(false) }, exists: exists(srv)}))
	})
	t.Run("cluster-failover", func(t *testing.T) {
		c := redistest.StartCluster(t, 3, 1)
		fo, l := newFailover(t, c.Addrs()...)
		defer fo.Close()
		// The master serving the load's keys (all load-* users hash apart;
		// kill the one serving the first load client's slot).
		master := c.MasterOf(t, "rl:{user:load-0}:open")
		var onMaster []string // the burst's client and the recovery's
		for i := 0; len(onMaster) < 2; i++ {
			if u := fmt.Sprintf("burst-%d", i); c.MasterOf(t, "rl:{user:"+u+"}:open") == master {
				onMaster = append(onMaster, u)
			}
		}
		burstUser := onMaster[0]
		clusterExists := func(key string) bool {
			for _, n := range c.Nodes {
				if n == master {
					continue
				}
				out, err := n.Do("-c", "exists", key)
				if err == nil && strings.TrimSpace(out) == "1" {
					return true
				}
			}
			return false
		}
		table = append(table, runFault(t, fo, l, fault{name: "cluster: kill -9 master, replica promoted", burstUser: burstUser, probeUser: onMaster[1],
			inject: master.Kill,
			restore: func() {
				// Redis answers again when the replica is promoted and
				// serves the slot: wait for that moment.
				deadline := time.Now().Add(30 * time.Second)
				for {
					if n, err := c.Master("rl:{user:load-0}:open"); err == nil && n != master && c.Agreed("rl:{user:load-0}:open", master) {
						if l := testLogger(); l != nil {
							l.Info("replica promoted", "addr", n.Addr())
						}
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("replica not promoted within 30 s")
					}
					time.Sleep(20 * time.Millisecond)
				}
				if testLogger() != nil {
					testLogger().Info("cluster ok again")
				}
			},
			exists: clusterExists}))
	})
	t.Logf("\n| fault | detection | recovery | p99 during | admission | goroutines |\n|---|---|---|---|---|---|\n%s", strings.Join(table, "\n"))
}

// TestRestartedEmpty: a Redis that restarts and loses every key is
// answered throughout; the buckets start afresh (documented).
func TestRestartedEmpty(t *testing.T) {
	srv, _, l := startFailover(t, nil)
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		l.Check(ctx, &limiter.Request{User: "u", Method: "GET", Path: "/api/x"})
	}
	srv.Restart()
	start := time.Now()
	var failed, degraded int
	for time.Since(start) < 3*time.Second {
		d, err := l.Check(ctx, &limiter.Request{User: "u", Method: "GET", Path: "/api/x"})
		if err != nil {
			failed++
		} else if d.Origin.Degraded() {
			degraded++
		} else if exists(srv)("rl:{user:u}:open") {
			t.Logf("restarted empty: back on the shared store %v after the restart (%d degraded answers meanwhile)",
				time.Since(start).Round(time.Millisecond), degraded)
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if failed > 0 {
		t.Errorf("%d decisions failed across the restart, want none", failed)
	}
	if !exists(srv)("rl:{user:u}:open") {
		t.Fatal("key not back in Redis 3 s after the restart")
	}
}

func testLogger() *slog.Logger {
	if os.Getenv("SLUICE_TEST_DEBUG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestDegradedKeepsDenials: a caller the shared limit denied with a wait
// stays denied when Redis then fails, until the wait is over — the local
// denial cache's answer is exact, and nobody can give the bucket capacity
// back while Redis is down — whereas a fresh caller gets the local
// fallback's coarse limit.
func TestDegradedKeepsDenials(t *testing.T) {
	srv, fo, l := startFailover(t, nil)
	ctx := context.Background()
	// Calls of cost 300 (half the limit): the denied one waits ~30 s for
	// its tokens, far longer than the breaker takes to open.
	req := limiter.Request{User: "greedy", Method: "GET", Path: "/api/orders", Cost: openLimit / 2}
	for i := 0; ; i++ {
		d, err := l.Check(ctx, &req)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			if d.Origin != limiter.OriginStore || d.RetryAfter <= 0 {
				t.Fatalf("denial from Redis: %+v, want source store with a wait", d)
			}
			break
		}
		if i > 2 {
			t.Fatalf("%d calls of cost %d allowed, limit %d", i+1, req.Cost, openLimit)
		}
	}
	srv.Kill()
	fresh := limiter.Request{User: "fresh", Method: "GET", Path: "/api/orders"}
	deadline := time.Now().Add(10 * time.Second)
	closed := func() bool { st, _ := fo.State(); return st == failover.Closed }
	for closed() && time.Now().Before(deadline) {
		l.Check(ctx, &fresh) //nolint:errcheck // failing calls open the breaker
	}
	if closed() {
		t.Fatal("breaker did not open within 10 s of the kill")
	}
	d, err := l.Check(ctx, &req)
	if err != nil || d.Allowed || d.Origin != limiter.OriginLocalDenialCache || d.RetryAfter < 20*time.Second {
		t.Errorf("the denied caller with Redis down: %+v, %v; want denied by the local denial cache with a wait", d, err)
	}
	d, err = l.Check(ctx, &limiter.Request{User: "another", Method: "GET", Path: "/api/orders"})
	if err != nil || !d.Allowed || d.Origin != limiter.OriginLocalFallback {
		t.Errorf("a fresh caller with Redis down: %+v, %v; want allowed by the local fallback", d, err)
	}
}
