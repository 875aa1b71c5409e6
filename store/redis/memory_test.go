package redis_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/seam/redisstore"
	"github.com/sluicehq/sluice/internal/testkit/conformance"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/limiter"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// TestExpiry: every key the store writes carries an expiry, and it falls
// one second (rounded up to the millisecond) after the moment the bucket is
// whole again — the ResetAfter of the decision that wrote it: not before,
// so no state is lost early, and not much later, so idle buckets go.
func TestExpiry(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, func(c *sredis.Config) { c.NoDenialCache = true }, srv.Addr())
	for _, k := range algorithm.Kinds() {
		for _, window := range []int64{conformance.Second, conformance.Minute} {
			t.Run(fmt.Sprintf("%s/window=%dms", k, window/1000), func(t *testing.T) {
				op := limiter.Op{Client: "user:expiry", Rule: fmt.Sprintf("%s-%d", k, window), Params: paramsOf(k, 10, window), Cost: 1}
				if k == algorithm.LeakyBucket {
					op.Params.Burst = 9
				}
				key := redisstore.Key(s, op.Client, op.Rule)
				for call := 1; call <= 4; call++ {
					start := time.Now()
					res, _ := take(t, s, op)
					pttl, err := strconv.ParseInt(do(t, srv, "pttl", key), 10, 64)
					elapsed := time.Since(start).Milliseconds() + 1
					if err != nil || !res[0].Allowed {
						t.Fatalf("call %d = %+v, PTTL %v", call, res[0], err)
					}
					// The key expires at decision + ceil(ResetAfter) + 1 s;
					// PTTL is read up to `elapsed` ms after the decision.
					most := (res[0].ResetAfter+999)/1000 + 1000
					if pttl == -2 && elapsed >= most {
						continue // expired before a slow machine read it
					}
					if pttl <= 0 || pttl > most || pttl < most-elapsed {
						t.Fatalf("call %d: PTTL %d ms, want in [%d, %d]: whole again in %d µs, plus 1 s",
							call, pttl, most-elapsed, most, res[0].ResetAfter)
					}
				}
			})
		}
	}
	// No key without an expiry. The one-second windows' keys may be gone
	// already (a slow machine takes over a second to get here); the
	// one-minute windows' keys are all still there.
	keys := strings.Fields(do(t, srv, "keys", "*"))
	minute := 0
	for _, key := range keys {
		if strings.HasSuffix(key, fmt.Sprintf("-%d", conformance.Minute)) {
			minute++
		}
	}
	if minute != len(algorithm.Kinds()) || len(keys) > 2*len(algorithm.Kinds()) {
		t.Fatalf("%d keys (%d of one-minute windows), want %d of one-minute windows and at most %d in all: %v",
			len(keys), minute, len(algorithm.Kinds()), 2*len(algorithm.Kinds()), keys)
	}
	// PTTL -1 is a key without an expiry; -2 a key that expired between
	// KEYS and PTTL (a one-second window's, on a slow machine).
	for _, key := range keys {
		if pttl := do(t, srv, "pttl", key); pttl == "-1" || (pttl == "-2" && strings.HasSuffix(key, fmt.Sprintf("-%d", conformance.Minute))) {
			t.Fatalf("key %s has PTTL %s, want an expiry", key, pttl)
		}
	}
}

// typicalClient and typicalRule make the typical key of docs/redis.md:
// rl:{user:u0001234567}:free-per-user (35 bytes).
const typicalClient, typicalRule = "user:u0001234567", "free-per-user"

// TestMemoryUsage measures MEMORY USAGE of one typical key per algorithm
// (rule free-per-user, 100 calls a minute) after its first call, and for
// the token bucket also after a second call 1.2 ms later, which leaves
// fractional tokens. Both token bucket rows and the leaky bucket must fit
// in 100 bytes: their state is one decimal integer (for the token bucket,
// the instant it is full again, in ns), which Redis keeps inside the object.
func TestMemoryUsage(t *testing.T) {
	srv := redistest.Start(t)
	var clock atomic.Int64
	s := openStore(t, func(c *sredis.Config) { c.Clock = clock.Load; c.NoDenialCache = true }, srv.Addr())
	type row struct {
		name   string
		kind   algorithm.Kind
		calls  []int64 // µs after the first call
		max    int64   // 0: not bounded by the test
		detail string
	}
	rows := []row{
		{"token_bucket", algorithm.TokenBucket, []int64{0}, 100, "whole tokens (99)"},
		{"token_bucket", algorithm.TokenBucket, []int64{0, 1234}, 100, "fractional tokens"},
		{"leaky_bucket", algorithm.LeakyBucket, []int64{0}, 100, "TAT"},
		{"fixed_window", algorithm.FixedWindow, []int64{0}, 0, "count 1"},
		{"sliding_window", algorithm.SlidingWindow, []int64{0}, 0, "two counts"},
		{"sliding_log", algorithm.SlidingLog, []int64{0}, 0, "1 entry"},
		{"sliding_log", algorithm.SlidingLog, make([]int64, 100), 0, "100 entries"},
	}
	t.Logf("%-15s %-18s %-9s %6s %s", "algorithm", "state", "encoding", "value", "MEMORY USAGE (bytes)")
	for _, r := range rows {
		do(t, srv, "flushall")
		key := redisstore.Key(s, typicalClient, typicalRule)
		if len(key) != 35 {
			t.Fatalf("typical key %q is %d bytes, want 35", key, len(key))
		}
		op := limiter.Op{Client: typicalClient, Rule: typicalRule, Params: paramsOf(r.kind, 100, conformance.Minute), Cost: 1}
		for i, at := range r.calls {
			clock.Store(conformance.Base + 30*conformance.Minute + 17*conformance.Second + at + int64(i))
			if res, _ := take(t, s, op); !res[0].Allowed {
				t.Fatalf("%s: call %d denied", r.name, i+1)
			}
		}
		usage, err := strconv.ParseInt(do(t, srv, "memory", "usage", key), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		enc := do(t, srv, "object", "encoding", key)
		size := do(t, srv, "strlen", key)
		if enc == "listpack" || enc == "skiplist" {
			size = do(t, srv, "zcard", key) + " entries"
		} else {
			size += " bytes"
		}
		t.Logf("%-15s %-18s %-9s %6s %d", r.name, r.detail, enc, size, usage)
		if r.max > 0 && usage > r.max {
			t.Errorf("%s (%s): MEMORY USAGE %d bytes, want ≤ %d", r.name, r.detail, usage, r.max)
		}
	}
}

// TestMemoryPerMillionClients measures used_memory growth on a fresh
// standalone server for 1,000,000 distinct clients of one rule (100 calls a
// day, so no key expires during the run), per algorithm, by driving 1M
// Takes through the store from 64 goroutines. Slow: run with
// SLUICE_REDIS_MEMORY=1.
func TestMemoryPerMillionClients(t *testing.T) {
	if os.Getenv("SLUICE_REDIS_MEMORY") != "1" {
		t.Skip("set SLUICE_REDIS_MEMORY=1 to drive 1M clients per algorithm (a few minutes)")
	}
	const clients = 1_000_000
	srv := redistest.Start(t)
	s := openStore(t, func(c *sredis.Config) { c.NoDenialCache = true }, srv.Addr())
	t.Logf("%-15s %12s %12s %14s %s", "algorithm", "keys", "used_memory+", "bytes/client", "MEMORY USAGE of one key")
	for _, k := range algorithm.Kinds() {
		do(t, srv, "flushall")
		before, _ := strconv.ParseInt(infoField(t, srv, "memory", "used_memory"), 10, 64)
		start := time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res := make([]algorithm.Result, 1)
				op := []limiter.Op{{Rule: typicalRule, Params: paramsOf(k, 100, conformance.Day), Cost: 1}}
				for {
					i := next.Add(1) - 1
					if i >= clients || time.Since(start) > 10*time.Minute {
						return
					}
					op[0].Client = fmt.Sprintf("user:u%010d", i)
					if _, err := s.Take(context.Background(), op, res); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		keys, _ := strconv.ParseInt(do(t, srv, "dbsize"), 10, 64)
		if keys != clients {
			t.Fatalf("%s: %d keys after %d clients, want %d", k, keys, clients, clients)
		}
		after, _ := strconv.ParseInt(infoField(t, srv, "memory", "used_memory"), 10, 64)
		one := do(t, srv, "memory", "usage", redisstore.Key(s, "user:u0000123456", typicalRule))
		t.Logf("%-15s %12d %12d %14.1f %s  (%s)", k, keys, after-before, float64(after-before)/clients, one, time.Since(start).Round(time.Second))
	}
}

// TestSlidingLogCallIsOneEntry: a sliding_log call of any cost is one entry
// of the key's sorted set and one ZADD (once a call of cost
// 10,000 wrote 10,000 entries, 1.3 MB, and ran past the store deadline),
// and the decisions stay those of the Go function.
func TestSlidingLogCallIsOneEntry(t *testing.T) {
	srv := redistest.Start(t)
	var clock atomic.Int64
	s := newStore(t, &clock, srv.Addr())
	p := paramsOf(algorithm.SlidingLog, algorithm.MaxLogLimit, conformance.Second)
	var st algorithm.State
	now := conformance.Base
	key := redisstore.Key(s, "user:log", "r")
	zadds := commandCalls(t, srv, "zadd")
	st = compareDecision(t, s, &clock, "user:log", p, st, now, algorithm.MaxLogLimit, "cost 10000")
	if n := do(t, srv, "zcard", key); n != "1" {
		t.Fatalf("after one call of cost %d: %s entries, want 1", algorithm.MaxLogLimit, n)
	}
	if got := commandCalls(t, srv, "zadd") - zadds; got != 1 {
		t.Fatalf("one call of cost %d ran ZADD %d times, want 1", algorithm.MaxLogLimit, got)
	}
	usage, err := strconv.ParseInt(do(t, srv, "memory", "usage", key), 10, 64)
	if err != nil || usage > 200 {
		t.Fatalf("MEMORY USAGE %d bytes (%v), want ≤ 200", usage, err)
	}
	// Denied calls, then calls as the window slides: 100 calls of 100.
	st = compareDecision(t, s, &clock, "user:log", p, st, now+1, 1, "cost 1 over the limit")
	for i := int64(1); i <= 100; i++ {
		st = compareDecision(t, s, &clock, "user:log", p, st, now+conformance.Second+i*conformance.Millisecond, 100, fmt.Sprintf("call %d", i))
	}
	if n, _ := strconv.Atoi(do(t, srv, "zcard", key)); n > 100 {
		t.Fatalf("%d entries after 100 calls, want ≤ 100", n)
	}
	st = compareDecision(t, s, &clock, "user:log", p, st, now+conformance.Second+100*conformance.Millisecond, 5000, "denied, retry in the log")
	_ = st
}
