package memory

import (
	"bytes"
	"context"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/limiter"
)

// ceilingStore returns a Store of 4 shards holding at most max buckets, on
// clock c, logging into logs.
func ceilingStore(t testing.TB, c *fakeClock, max int, logs *bytes.Buffer) *Store {
	t.Helper()
	s, err := New(Config{Shards: 4, Clock: c.Now, SweepInterval: -1, MaxBuckets: max,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestCeiling: twice the ceiling in distinct clients keeps the store at its
// ceiling; the evictions are counted and logged once; no call is denied
// for it; and callers that stay keep their exact state: denied callers stay
// denied, because full buckets (idle: no state) and buckets closer to full
// are evicted first.
func TestCeiling(t *testing.T) {
	const max = 1024
	clock := newClock(1_700_000_000_000_000)
	var logs bytes.Buffer
	s := ceilingStore(t, clock, max, &logs)
	hour := params(algorithm.TokenBucket, 2, 3600*second, 0)
	short := params(algorithm.TokenBucket, 10, second, 0)

	// Eight callers use up their hourly 2 and are denied.
	denied := make([]string, 8)
	for i := range denied {
		denied[i] = fmt.Sprintf("user:denied-%d", i)
		if r := take(t, s, op(denied[i], "hour", hour, 2)); !r[0].Allowed {
			t.Fatalf("%s's first call denied", denied[i])
		}
		if r := take(t, s, op(denied[i], "hour", hour, 1)); r[0].Allowed {
			t.Fatalf("%s's third call allowed", denied[i])
		}
	}
	// Half the ceiling in callers of a one-second rule, full again (idle)
	// ten seconds later.
	for i := range max / 2 {
		take(t, s, op(fmt.Sprintf("user:short-%d", i), "short", short, 1))
	}
	clock.Add(10 * second)
	// A flood: twice the ceiling in distinct clients, one call each, on the
	// hourly rule. Every call is allowed.
	const flood = 2 * max
	for i := range flood {
		if r := take(t, s, op(fmt.Sprintf("ip:2001:db8:%x::/64", i), "hour", hour, 1)); !r[0].Allowed {
			t.Fatalf("flood call %d denied; the ceiling must never deny", i)
		}
		if n := s.Len(); n > max {
			t.Fatalf("after %d flood calls Len = %d, want ≤ %d", i+1, n, max)
		}
	}
	// The idle short buckets made room first, uncounted like a sweep's;
	// every other bucket that went was evicted.
	held := len(denied) + max/2 + flood
	if got, want := s.Evictions(), uint64(held-max/2-s.Len()); got != want {
		t.Errorf("Evictions = %d, want %d (held %d, %d idle, Len %d)", got, want, held, max/2, s.Len())
	}
	for _, c := range denied {
		if r := take(t, s, op(c, "hour", hour, 1)); r[0].Allowed {
			t.Errorf("%s allowed after the flood: its denied bucket was evicted", c)
		}
	}
	if n := strings.Count(logs.String(), "reached its ceiling"); n != 1 {
		t.Errorf("the ceiling was logged %d times, want once:\n%s", n, logs.String())
	}
}

// TestCeilingEvictsFullFirst: at the ceiling, a new bucket takes the place
// of a full one (idle, no state) before any bucket with state, so a flood
// of as many new clients as there are full buckets evicts only those.
func TestCeilingEvictsFullFirst(t *testing.T) {
	const max = 256
	clock := newClock(1_700_000_000_000_000)
	// One shard, so that it reaches the ceiling exactly when the store does.
	s, err := New(Config{Shards: 1, Clock: clock.Now, SweepInterval: -1, MaxBuckets: max})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hour := params(algorithm.TokenBucket, 100, 3600*second, 0)
	short := params(algorithm.TokenBucket, 10, second, 0)
	// A quarter of the ceiling in clients with state, then the rest in
	// buckets that will be full.
	var kept []string
	for i := range max / 4 {
		c := fmt.Sprintf("user:kept-%d", i)
		take(t, s, op(c, "hour", hour, 50))
		kept = append(kept, c)
	}
	const full = max - max/4
	for i := range full {
		take(t, s, op(fmt.Sprintf("user:short-%d", i), "short", short, 1))
	}
	clock.Add(10 * second)
	for i := range full {
		take(t, s, op(fmt.Sprintf("user:new-%d", i), "hour", hour, 1))
	}
	if n, ev := s.Len(), s.Evictions(); n != max || ev != 0 {
		t.Errorf("Len = %d, Evictions = %d; want %d, 0: the full buckets made the room", n, ev, max)
	}
	for _, c := range kept {
		// 50 of 100 left: a call of 51 is denied unless the bucket was
		// evicted (a fresh one holds 100).
		if r := take(t, s, op(c, "hour", hour, 51)); r[0].Allowed {
			t.Errorf("%s's bucket with state was evicted while full ones remained", c)
		}
	}
}

// TestCeilingKeepsTheCallsOwnBuckets: a call whose ops all need new
// buckets in a full shard evicts others, never a bucket the call itself
// made, and each op's state is stored.
func TestCeilingKeepsTheCallsOwnBuckets(t *testing.T) {
	clock := newClock(1_700_000_000_000_000)
	s, err := New(Config{Shards: 1, Clock: clock.Now, SweepInterval: -1, MaxBuckets: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := params(algorithm.TokenBucket, 10, 3600*second, 0)
	for i := range 4 {
		take(t, s, op(fmt.Sprintf("user:old-%d", i), "r", p, 1))
	}
	ops := make([]limiter.Op, 6) // more than the ceiling: the call's own may not all fit
	for i := range ops {
		ops[i] = op(fmt.Sprintf("user:new-%d", i), fmt.Sprintf("r%d", i), p, 10)
	}
	take(t, s, ops...)
	if got := s.Len(); got != 6 {
		t.Errorf("Len = %d, want 6: the four old evicted, the call's six kept (a call is never cut short)", got)
	}
	for i := range ops {
		if r := take(t, s, op(ops[i].Client, ops[i].Rule, p, 1)); r[0].Allowed {
			t.Errorf("op %d's bucket lost its state (allowed after using all 10)", i)
		}
	}
}

// TestCeilingConcurrent: many goroutines flooding distinct clients keep
// the store at its ceiling, under -race.
func TestCeilingConcurrent(t *testing.T) {
	const max = 2048
	clock := newClock(1_700_000_000_000_000)
	s := ceilingStore(t, clock, max, &bytes.Buffer{})
	p := params(algorithm.TokenBucket, 10, 3600*second, 0)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			res := make([]algorithm.Result, 2)
			for i := range max {
				c := fmt.Sprintf("user:%d-%d", g, i)
				ops := []limiter.Op{op(c, "a", p, 1), op(c, "b", p, 1)}
				if _, err := s.Take(context.Background(), ops, res); err != nil || !res[0].Allowed || !res[1].Allowed {
					t.Errorf("Take = %v, %+v; want allowed", err, res)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := s.Len(); n > max {
		t.Errorf("Len = %d, want ≤ %d", n, max)
	}
	if got, want := s.Evictions(), uint64(8*max*2-s.Len()); got != want {
		t.Errorf("Evictions = %d, want %d", got, want)
	}
}

// TestCeilingBoundsHeap: the Go heap a store takes stays at what its
// ceiling's worth of buckets takes, however many distinct clients come.
func TestCeilingBoundsHeap(t *testing.T) {
	const max = 50_000
	clock := newClock(1_700_000_000_000_000)
	s, err := New(Config{Clock: clock.Now, SweepInterval: -1, MaxBuckets: max})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := params(algorithm.TokenBucket, 10, 3600*second, 0)
	heap := func() int64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	res := make([]algorithm.Result, 1)
	flood := func(from, to int) {
		ops := []limiter.Op{op("", "per-ip", p, 1)}
		for i := from; i < to; i++ {
			ops[0].Client = fmt.Sprintf("ip:2001:db8:%x::/64", i)
			s.Take(context.Background(), ops, res)
		}
	}
	start := heap()
	flood(0, max)
	atMax := heap() - start
	flood(max, 4*max)
	after := heap() - start
	runtime.KeepAlive(s)
	if s.Len() > max {
		t.Errorf("Len = %d, want ≤ %d", s.Len(), max)
	}
	// Without a ceiling the heap grows fourfold; with it the slabs keep
	// their size, give or take the hash index's growth.
	if after > atMax*3/2 {
		t.Errorf("heap after 4× the ceiling in clients = %d bytes, want ≤ 1.5 × %d (its size at the ceiling)", after, atMax)
	}
	t.Logf("heap at the ceiling (%d buckets): %d bytes (%d/bucket); after %d clients: %d bytes", max, atMax, atMax/max, 4*max, after)
}

// checkShards fails unless every shard's count is the sum of its tables',
// every live entry is found by its own client, every sliding-log entry has
// its log, and every table is in the eviction list exactly once.
func checkShards(t *testing.T, s *Store) {
	t.Helper()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n := 0
		if len(sh.list) != len(sh.tables) {
			t.Errorf("shard %d: %d tables listed, %d held", i, len(sh.list), len(sh.tables))
		}
		for _, tab := range sh.list {
			if sh.tables[tab.rule] != tab {
				t.Errorf("shard %d: listed table %q is not the one held", i, tab.rule)
			}
			live := 0
			for idx := range tab.ents {
				e := &tab.ents[idx]
				if e.kind == freeKind {
					continue
				}
				live++
				if got := tab.find(uint32(maphash.String(s.seed, e.client)>>32), e.client); got != idx {
					t.Errorf("shard %d table %q: find(%q) = %d, want %d", i, tab.rule, e.client, got, idx)
				}
				if _, ok := tab.logs[uint32(idx)]; ok != (e.kind == algorithm.SlidingLog) {
					t.Errorf("shard %d table %q: entry %d of kind %v has a log: %v", i, tab.rule, idx, e.kind, ok)
				}
			}
			if live != tab.n {
				t.Errorf("shard %d table %q: %d live entries, n = %d", i, tab.rule, live, tab.n)
			}
			n += live
		}
		if n != sh.n {
			t.Errorf("shard %d: %d buckets in its tables, n = %d", i, n, sh.n)
		}
		sh.mu.Unlock()
	}
}

// TestCeilingWithSweeps: random calls of one to three ops, of every
// algorithm, on a store at its ceiling while sweeps (which drop idle
// buckets, empty tables, and compact) run alongside and the clock moves
// keep the store's books straight and under its ceiling.
func TestCeilingWithSweeps(t *testing.T) {
	const max = 64
	clock := newClock(1_700_000_000_000_000)
	s := ceilingStore(t, clock, max, &bytes.Buffer{})
	kinds := []algorithm.Kind{algorithm.TokenBucket, algorithm.LeakyBucket, algorithm.FixedWindow, algorithm.SlidingWindow, algorithm.SlidingLog}
	stop := sweepAlongside(s, clock, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	res := make([]algorithm.Result, 3)
	for step := range 20_000 {
		c := fmt.Sprintf("user:%d", rng.IntN(500))
		n := 1 + rng.IntN(3)
		ops := make([]limiter.Op, n)
		for j := range ops {
			k := kinds[rng.IntN(len(kinds))]
			ops[j] = op(c, fmt.Sprintf("r%d-%v", j, k), params(k, 1+int64(rng.IntN(5)), int64(1+rng.IntN(3))*second, 0), 1)
		}
		if _, err := s.Take(context.Background(), ops, res); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if rng.IntN(50) == 0 {
			clock.Add(int64(rng.IntN(2000)) * 1000)
		}
	}
	stop()
	if n := s.Len(); n > max {
		t.Errorf("Len = %d, want ≤ %d", n, max)
	}
	checkShards(t, s)
}
