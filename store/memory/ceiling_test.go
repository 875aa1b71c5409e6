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

// TestCeilingNeverGivesAllowanceBack: a flood of twice the ceiling in
// fresh ids, five one-unit calls each (issue 27 §5), keeps the store at its
// ceiling and hands nobody an allowance back: callers it denied stay
// denied until their real retry time, callers part way through keep
// exactly what they had left, full buckets make room first (counted as
// evictions, logged nowhere), and a second round of the same ids, emptied
// in the first, is admitted nowhere. Ids the store had no room for share
// one overflow bucket per rule and shard (counted, logged once).
func TestCeilingNeverGivesAllowanceBack(t *testing.T) {
	const max = 1024
	clock := newClock(1_700_000_000_000_000)
	var logs bytes.Buffer
	s := ceilingStore(t, clock, max, &logs)
	hour := params(algorithm.TokenBucket, 5, 3600*second, 0) // one back every 12 minutes
	short := params(algorithm.TokenBucket, 10, second, 0)

	// Eight callers use up their hourly 5 and are denied; sixteen use 3.
	denied := make([]string, 8)
	for i := range denied {
		denied[i] = fmt.Sprintf("user:denied-%d", i)
		if r := take(t, s, op(denied[i], "hour", hour, 5)); !r[0].Allowed {
			t.Fatalf("%s's first call denied", denied[i])
		}
	}
	partial := make([]string, 16)
	for i := range partial {
		partial[i] = fmt.Sprintf("user:partial-%d", i)
		take(t, s, op(partial[i], "hour", hour, 3))
	}
	// Half the ceiling in callers of a one-second rule, full again (idle)
	// ten seconds later: the room a flood may take.
	for i := range max / 2 {
		take(t, s, op(fmt.Sprintf("user:short-%d", i), "short", short, 1))
	}
	clock.Add(10 * second)

	flood := func() (allowed int) {
		for i := range 2 * max {
			c := fmt.Sprintf("ip:2001:db8:%x::/64", i)
			for range 5 {
				if r := take(t, s, op(c, "hour", hour, 1)); r[0].Allowed {
					allowed++
				}
			}
			if n := s.Len(); n > max {
				t.Fatalf("after flood id %d Len = %d, want ≤ %d", i, n, max)
			}
		}
		return allowed
	}
	first := flood()
	held := len(denied) + len(partial) + max/2
	room := max - held + max/2 // the free room and the idle short buckets
	// Each id with a bucket of its own got its 5; the others shared one
	// overflow bucket of 5 per shard (4).
	if first > 5*room+5*4 {
		t.Errorf("first round: %d calls allowed, want at most %d (%d ids with room, 4 overflow buckets of 5)", first, 5*room+5*4, room)
	}
	if got := s.Evictions(); got != max/2 {
		t.Errorf("Evictions = %d, want %d: the full short buckets, and only they", got, max/2)
	}
	if got := s.Overflows(); got == 0 {
		t.Errorf("Overflows = 0, want the flood ids past the ceiling counted")
	}
	if second := flood(); second != 0 {
		t.Errorf("second round of the same ids: %d calls allowed, want 0 (each id emptied its allowance in the first)", second)
	}
	for _, c := range partial {
		if r := take(t, s, op(c, "hour", hour, 2)); !r[0].Allowed {
			t.Errorf("%s lost its 2 remaining calls in the flood", c)
		}
		if r := take(t, s, op(c, "hour", hour, 1)); r[0].Allowed {
			t.Errorf("%s got more than its 2 remaining calls after the flood", c)
		}
	}
	// A denied caller's real retry time: 12 minutes after its fifth call.
	for _, c := range denied {
		r := take(t, s, op(c, "hour", hour, 1))
		if r[0].Allowed {
			t.Errorf("%s allowed after the flood: its bucket was forgotten", c)
		} else if want := 12*60*second - 10*second; r[0].RetryAfter != want {
			t.Errorf("%s: RetryAfter = %v, want %v, its real retry time", c, r[0].RetryAfter, want)
		}
	}
	clock.Add(12*60*second - 10*second - 1)
	for _, c := range denied {
		if r := take(t, s, op(c, "hour", hour, 1)); r[0].Allowed {
			t.Errorf("%s allowed before its retry time", c)
		}
	}
	clock.Add(1)
	for _, c := range denied {
		if r := take(t, s, op(c, "hour", hour, 1)); !r[0].Allowed {
			t.Errorf("%s still denied at its retry time", c)
		}
	}
	if n := strings.Count(logs.String(), "reached its ceiling"); n != 1 {
		t.Errorf("the ceiling was logged %d times, want once:\n%s", n, logs.String())
	}
	checkShards(t, s)
}

// TestCeilingNewCallerWhenFull: a new caller in a shard at its ceiling
// with no full bucket is decided on the overflow bucket of its rule, which
// it shares with every such caller; once room is back, a caller's own
// bucket starts from the overflow bucket's state until that one is full
// again, so moving to a bucket of its own gives it nothing back.
func TestCeilingNewCallerWhenFull(t *testing.T) {
	clock := newClock(1_700_000_000_000_000)
	s, err := New(Config{Shards: 1, Clock: clock.Now, SweepInterval: -1, MaxBuckets: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, k := range []algorithm.Kind{algorithm.TokenBucket, algorithm.LeakyBucket, algorithm.FixedWindow, algorithm.SlidingWindow, algorithm.SlidingLog} {
		t.Run(k.String(), func(t *testing.T) {
			clock.Add(7200 * second) // every bucket of the last run full
			hour := params(k, 3, 3600*second, 0)
			brief := params(k, 10, 10*second, 0)
			for i := range 4 { // the ceiling, with state for a few seconds
				take(t, s, op(fmt.Sprintf("user:old-%d", i), "brief", brief, 1))
			}
			calls := 0
			for i := range 8 {
				if r := take(t, s, op(fmt.Sprintf("user:new-%d", i), "hour", hour, 1)); r[0].Allowed {
					calls++
				}
			}
			if want := int(hour.Capacity()); calls != want {
				t.Errorf("8 new callers at the ceiling: %d allowed, want %d, one bucket's worth", calls, want)
			}
			if n := s.Len(); n != 4 {
				t.Errorf("Len = %d, want 4", n)
			}
			// The old buckets full again: room. A caller's own bucket
			// starts from the overflow bucket, which is empty.
			clock.Add(30 * second)
			for _, c := range []string{"user:new-0", "user:new-9"} {
				if r := take(t, s, op(c, "hour", hour, 1)); r[0].Allowed {
					t.Errorf("%s allowed on a bucket of its own while the overflow bucket is empty", c)
				}
			}
			if r := take(t, s, op("user:new-0", "hour", hour, 0)); r[0].Remaining != 0 {
				t.Errorf("user:new-0 has a bucket of its own with %d calls left, want 0", r[0].Remaining)
			}
			// Once the overflow bucket is full again (a sliding window
			// remembers the window before), new callers start full.
			clock.Add(2 * 3600 * second)
			if r := take(t, s, op("user:new-10", "hour", hour, hour.Capacity())); !r[0].Allowed {
				t.Errorf("a new caller an hour later denied: %+v", r[0])
			}
			checkShards(t, s)
		})
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
	if n, ev, ov := s.Len(), s.Evictions(), s.Overflows(); n != max || ev != full || ov != 0 {
		t.Errorf("Len = %d, Evictions = %d, Overflows = %d; want %d, %d, 0: the full buckets made the room", n, ev, ov, max, full)
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
// buckets in a shard at its ceiling drops full buckets for as many as
// there are, never a bucket with state nor one the call itself made; the
// ops left over are decided on their rules' overflow buckets; and each
// op's state is kept, in a bucket of its own or the overflow one.
func TestCeilingKeepsTheCallsOwnBuckets(t *testing.T) {
	clock := newClock(1_700_000_000_000_000)
	s, err := New(Config{Shards: 1, Clock: clock.Now, SweepInterval: -1, MaxBuckets: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := params(algorithm.TokenBucket, 10, 3600*second, 0)
	short := params(algorithm.TokenBucket, 10, second, 0)
	take(t, s, op("user:old-0", "r", p, 1))
	take(t, s, op("user:old-1", "r", p, 1))
	take(t, s, op("user:idle-0", "s", short, 1))
	take(t, s, op("user:idle-1", "s", short, 1))
	clock.Add(10 * second)
	ops := make([]limiter.Op, 6) // more than the ceiling
	for i := range ops {
		ops[i] = op(fmt.Sprintf("user:new-%d", i), fmt.Sprintf("r%d", i), p, 10)
	}
	take(t, s, ops...)
	if n, ev, ov := s.Len(), s.Evictions(), s.Overflows(); n != 4 || ev != 2 || ov != 4 {
		t.Errorf("Len, Evictions, Overflows = %d, %d, %d; want 4, 2, 4: the two full buckets made room for two ops, four overflowed", n, ev, ov)
	}
	for _, c := range []string{"user:old-0", "user:old-1"} {
		if r := take(t, s, op(c, "r", p, 10)); r[0].Allowed {
			t.Errorf("%s's bucket with state was dropped (a fresh one holds 10)", c)
		}
	}
	for i := range ops {
		if r := take(t, s, op(ops[i].Client, ops[i].Rule, p, 1)); r[0].Allowed {
			t.Errorf("op %d's state was lost (allowed after using all 10)", i)
		}
	}
	checkShards(t, s)
}

// TestCeilingConcurrent: many goroutines flooding distinct clients keep
// the store at its ceiling and its books straight, under -race; nothing
// is full, so nothing is evicted and the ids past the ceiling overflow.
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
				if _, err := s.Take(context.Background(), ops, res); err != nil {
					t.Errorf("Take = %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := s.Len(); n > max {
		t.Errorf("Len = %d, want ≤ %d", n, max)
	}
	if ev, ov := s.Evictions(), s.Overflows(); ev != 0 || ov < uint64(8*max*2-max) {
		t.Errorf("Evictions, Overflows = %d, %d; want 0 and at least %d", ev, ov, 8*max*2-max)
	}
	checkShards(t, s)
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

// TestCeilingOverflowTwiceInOneCall: two ops of one call (CheckMany, two
// callers of one rule) decided on the same overflow bucket both count in
// it, for every algorithm.
func TestCeilingOverflowTwiceInOneCall(t *testing.T) {
	for _, k := range []algorithm.Kind{algorithm.TokenBucket, algorithm.LeakyBucket, algorithm.FixedWindow, algorithm.SlidingWindow, algorithm.SlidingLog} {
		t.Run(k.String(), func(t *testing.T) {
			clock := newClock(1_700_000_000_000_000)
			s, err := New(Config{Shards: 1, Clock: clock.Now, SweepInterval: -1, MaxBuckets: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			p := params(k, 10, 3600*second, 0)
			take(t, s, op("user:old-0", "other", p, 1))
			take(t, s, op("user:old-1", "other", p, 1))
			hour := params(k, 3, 3600*second, 0)
			capacity := hour.Capacity()
			r := take(t, s, op("user:a", "hour", hour, 1), op("user:b", "hour", hour, 1))
			if !r[0].Allowed || !r[1].Allowed {
				t.Fatalf("two new callers at the ceiling: %+v", r)
			}
			if got := s.Overflows(); got != 2 {
				t.Errorf("Overflows = %d, want 2", got)
			}
			left := 0
			for i := range 10 {
				if r := take(t, s, op(fmt.Sprintf("user:c-%d", i), "hour", hour, 1)); r[0].Allowed {
					left++
				}
			}
			if want := int(capacity) - 2; left != want {
				t.Errorf("after a call of two ops on the overflow bucket, %d more calls pass, want %d", left, want)
			}
			checkShards(t, s)
		})
	}
}
