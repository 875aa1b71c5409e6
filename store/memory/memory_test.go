package memory

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/testkit/conformance"
	"github.com/sluicehq/sluice/limiter"
)

const (
	second = conformance.Second
	minute = conformance.Minute
	day    = conformance.Day
)

// fakeClock is a clock tests set by hand.
type fakeClock struct{ now atomic.Int64 }

func (c *fakeClock) Now() int64     { return c.now.Load() }
func (c *fakeClock) Set(now int64)  { c.now.Store(now) }
func (c *fakeClock) Add(d int64)    { c.now.Add(d) }
func newClock(now int64) *fakeClock { c := &fakeClock{}; c.Set(now); return c }

// newStore returns a Store on clock c without a background sweeper.
func newStore(t testing.TB, c *fakeClock) *Store {
	t.Helper()
	s, err := New(Config{Shards: 16, Clock: c.Now, SweepInterval: -1})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func params(k algorithm.Kind, limit, window, burst int64) algorithm.Params {
	return algorithm.Params{Kind: k, Limit: limit, Window: window, Burst: burst}
}

func op(client, rule string, p algorithm.Params, cost int64) limiter.Op {
	return limiter.Op{Client: client, Rule: rule, Params: p, Cost: cost}
}

// take runs one call and fails the test on error.
func take(t testing.TB, s *Store, ops ...limiter.Op) []algorithm.Result {
	t.Helper()
	res := make([]algorithm.Result, len(ops))
	if _, err := s.Take(context.Background(), ops, res); err != nil {
		t.Fatalf("Take: %v", err)
	}
	return res
}

func TestConformance(t *testing.T) {
	clock := newClock(conformance.Base)
	s := newStore(t, clock)
	var n int
	conformance.Run(t, func(t *testing.T) conformance.Bucket {
		n++
		client := fmt.Sprintf("user:case-%d", n)
		return func(p algorithm.Params, now, cost int64) (algorithm.Result, error) {
			clock.Set(now)
			res := make([]algorithm.Result, 1)
			got, err := s.Take(context.Background(), []limiter.Op{op(client, "rule", p, cost)}, res)
			if err == nil && got.Now != now {
				t.Errorf("Take returned now = %d, want %d", got, now)
			}
			return res[0], err
		}
	})
}

// TestConformanceAlongside runs the tables again with every call carrying a
// second, always-allowed op on another client: the extra op must change no
// decision. It is a fixed window: the clock goes back between cases (and
// in some), which a token bucket counts as debt, up to empty.
func TestConformanceAlongside(t *testing.T) {
	clock := newClock(conformance.Base)
	s := newStore(t, clock)
	var n int
	big := params(algorithm.FixedWindow, 1_000_000_000, second, 0)
	conformance.Run(t, func(t *testing.T) conformance.Bucket {
		n++
		client := fmt.Sprintf("user:case-%d", n)
		return func(p algorithm.Params, now, cost int64) (algorithm.Result, error) {
			clock.Set(now)
			res := make([]algorithm.Result, 2)
			_, err := s.Take(context.Background(), []limiter.Op{
				op("ip:other", "global", big, 1),
				op(client, "rule", p, cost),
			}, res)
			return res[1], err
		}
	})
}

func TestAllOrNothing(t *testing.T) {
	tb := params(algorithm.TokenBucket, 10, minute, 0)
	one := params(algorithm.TokenBucket, 1, minute, 0)
	for _, k := range algorithm.Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			clock := newClock(conformance.Base)
			s := newStore(t, clock)
			p := params(k, 10, minute, 0)
			if k == algorithm.LeakyBucket {
				p.Burst = 9 // capacity 10, like the others
			}

			// Spend the second bucket, then a call on both is denied by it
			// and leaves the first untouched.
			if r := take(t, s, op("user:a", "strict", one, 1)); !r[0].Allowed {
				t.Fatalf("first call on strict denied: %+v", r[0])
			}
			for i := range 3 {
				r := take(t, s, op("user:a", "main", p, 1), op("user:a", "strict", one, 1))
				if !r[0].Allowed || r[1].Allowed {
					t.Fatalf("call %d = (allowed %v, %v), want (true, false)", i, r[0].Allowed, r[1].Allowed)
				}
				if got, want := r[0].Remaining, int64(9); got != want {
					t.Fatalf("call %d: main remaining = %d, want %d", i, got, want)
				}
			}
			if got, want := take(t, s, op("user:a", "main", p, 1))[0].Remaining, int64(9); got != want {
				t.Errorf("after denied calls: main remaining = %d, want %d (nothing consumed)", got, want)
			}

			// A denying shadow op does not veto; the others are consumed.
			sh := op("user:a", "strict", one, 1)
			sh.Shadow = true
			r := take(t, s, op("user:a", "main", p, 1), sh, op("ip:1", "ip", tb, 2))
			if !r[0].Allowed || r[1].Allowed || !r[2].Allowed {
				t.Fatalf("shadow call = (%v, %v, %v), want (true, false, true)", r[0].Allowed, r[1].Allowed, r[2].Allowed)
			}
			if got, want := take(t, s, op("user:a", "main", p, 1))[0].Remaining, int64(7); got != want {
				t.Errorf("after shadow call: main remaining = %d, want %d", got, want)
			}
			if got, want := take(t, s, op("ip:1", "ip", tb, 1))[0].Remaining, int64(7); got != want {
				t.Errorf("after shadow call: ip remaining = %d, want %d", got, want)
			}

			// An allowed shadow op of an allowed call is consumed.
			sh = op("user:b", "shadow", p, 4)
			sh.Shadow = true
			take(t, s, sh)
			if got, want := take(t, s, op("user:b", "shadow", p, 1))[0].Remaining, int64(5); got != want {
				t.Errorf("shadow bucket remaining = %d, want %d", got, want)
			}

			// An allowed shadow op of a denied call is not consumed.
			sh = op("user:c", "shadow", p, 1)
			sh.Shadow = true
			take(t, s, sh, op("user:a", "strict", one, 1))
			if got, want := take(t, s, op("user:c", "shadow", p, 1))[0].Remaining, int64(9); got != want {
				t.Errorf("shadow of denied call: remaining = %d, want %d", got, want)
			}

			// A denied call on new buckets creates none.
			before := s.Len()
			take(t, s, op("user:new", "main", p, 1), op("user:new", "huge", p, 11))
			if got := s.Len(); got != before {
				t.Errorf("Len after a denied call on new buckets = %d, want %d", got, before)
			}
		})
	}
}

// TestAllOrNothingSlidingLog covers the log that Apply reslices and appends
// to: an allowed sliding-log op of a denied call, after older entries have
// left the window, must leave the log as it was.
func TestAllOrNothingSlidingLog(t *testing.T) {
	clock := newClock(conformance.Base)
	s := newStore(t, clock)
	p := params(algorithm.SlidingLog, 5, second, 0)
	one := params(algorithm.TokenBucket, 1, day, 0)
	take(t, s, op("user:a", "strict", one, 1))
	for i := range 4 {
		clock.Set(conformance.Base + int64(i)*100*conformance.Millisecond)
		take(t, s, op("user:a", "log", p, 1))
	}
	// At +1.15s the entries at 0 and 0.1s have left: 2 remain (0.2s, 0.3s).
	clock.Set(conformance.Base + 1150*conformance.Millisecond)
	r := take(t, s, op("user:a", "log", p, 2), op("user:a", "strict", one, 1))
	if !r[0].Allowed || r[1].Allowed {
		t.Fatalf("call = (%v, %v), want (true, false)", r[0].Allowed, r[1].Allowed)
	}
	steps := []struct {
		at             int64
		allowed        bool
		remaining, rty int64
	}{
		{1150, true, 2, 0},   // 0.2, 0.3, +1.15 → 3 of 5
		{1150, true, 1, 0},   // 4 of 5
		{1150, true, 0, 0},   // 5 of 5
		{1150, false, 0, 50}, // full until 0.2 leaves at 1.2
		{1200, true, 0, 0},
	}
	for i, st := range steps {
		clock.Set(conformance.Base + st.at*conformance.Millisecond)
		got := take(t, s, op("user:a", "log", p, 1))[0]
		if got.Allowed != st.allowed || got.Remaining != st.remaining || got.RetryAfter != st.rty*conformance.Millisecond {
			t.Errorf("step %d = {allowed %v remaining %d retry %dµs}, want {%v %d %dµs}",
				i, got.Allowed, got.Remaining, got.RetryAfter, st.allowed, st.remaining, st.rty*conformance.Millisecond)
		}
	}
}

func TestAlgorithmChangeResetsBucket(t *testing.T) {
	clock := newClock(conformance.Base)
	s := newStore(t, clock)
	// Spend 3 of 10 under each algorithm in turn; each switch starts anew.
	kinds := append(append([]algorithm.Kind{}, algorithm.Kinds()...), algorithm.TokenBucket, algorithm.SlidingLog, algorithm.LeakyBucket)
	for i, k := range kinds {
		p := params(k, 10, minute, 0)
		if k == algorithm.LeakyBucket {
			p.Burst = 9 // capacity 10, like the others
		}
		r := take(t, s, op("user:a", "r", p, 3))
		want := int64(7)
		if !r[0].Allowed || r[0].Remaining != want {
			t.Errorf("switch %d to %v: allowed %v remaining %d, want true %d", i, k, r[0].Allowed, r[0].Remaining, want)
		}
		if got := s.Len(); got != 1 {
			t.Errorf("switch %d to %v: Len = %d, want 1", i, k, got)
		}
	}
}

func TestSweep(t *testing.T) {
	clock := newClock(conformance.Base)
	s := newStore(t, clock)
	short := params(algorithm.FixedWindow, 10, second, 0)  // idle at the next window
	long := params(algorithm.TokenBucket, 10, minute, 0)   // full again 6 s after one call
	logp := params(algorithm.SlidingLog, 10, 10*second, 0) // idle 10 s after the last call
	take(t, s, op("user:a", "short", short, 1), op("user:a", "long", long, 1), op("user:a", "log", logp, 1))
	take(t, s, op("user:b", "short", short, 1))
	if got := s.Len(); got != 4 {
		t.Fatalf("Len = %d, want 4", got)
	}
	steps := []struct {
		at            int64
		dropped, left int
	}{
		{0, 0, 4},
		{1 * second, 0, 4}, // fixed windows idle from +1s, plus margin
		{2 * second, 2, 2},
		{6 * second, 0, 2}, // token bucket full from +6s, plus margin
		{7 * second, 1, 1},
		{10 * second, 0, 1}, // log idle from +10s, plus margin
		{11 * second, 1, 0},
		{12 * second, 0, 0},
	}
	for _, st := range steps {
		if got := s.Sweep(conformance.Base + st.at); got != st.dropped {
			t.Errorf("Sweep(+%ds) = %d, want %d", st.at/second, got, st.dropped)
		}
		if got := s.Len(); got != st.left {
			t.Errorf("after Sweep(+%ds): Len = %d, want %d", st.at/second, got, st.left)
		}
	}
}

func TestSweepKeepsLiveState(t *testing.T) {
	clock := newClock(conformance.Base)
	s := newStore(t, clock)
	p := params(algorithm.TokenBucket, 10, 10*minute, 0) // one token a minute
	take(t, s, op("user:a", "r", p, 5))
	clock.Set(conformance.Base + 30*second)
	if got := s.Sweep(clock.Now()); got != 0 {
		t.Fatalf("Sweep = %d, want 0", got)
	}
	if got, want := take(t, s, op("user:a", "r", p, 1))[0].Remaining, int64(4); got != want {
		t.Errorf("remaining after sweep = %d, want %d", got, want)
	}
}

// TestIdleIsNew checks that a bucket past its expiry is treated as new even
// before it is swept, so that sweep timing never changes a decision — even
// after a rule edit whose new params the old state would not be idle under.
func TestIdleIsNew(t *testing.T) {
	clock := newClock(conformance.Base)
	s := newStore(t, clock)
	take(t, s, op("user:a", "r", params(algorithm.FixedWindow, 3, second, 0), 3))
	clock.Set(conformance.Base + 5*second)
	// Same window length doubled: the old window start is not this one's.
	r := take(t, s, op("user:a", "r", params(algorithm.FixedWindow, 3, 2*second, 0), 1))
	if !r[0].Allowed || r[0].Remaining != 2 {
		t.Errorf("idle bucket: allowed %v remaining %d, want true 2", r[0].Allowed, r[0].Remaining)
	}
}

func TestTakeErrors(t *testing.T) {
	s := newStore(t, newClock(conformance.Base))
	good := params(algorithm.TokenBucket, 1, second, 0)
	tests := []struct {
		name string
		ops  []limiter.Op
		res  int
		want error
	}{
		{"cost -1", []limiter.Op{op("user:a", "r", good, -1)}, 1, ErrInvalidOp},
		{"limit 0", []limiter.Op{op("user:a", "r", params(algorithm.FixedWindow, 0, second, 0), 1)}, 1, ErrInvalidOp},
		{"window 0", []limiter.Op{op("user:a", "r", params(algorithm.FixedWindow, 1, 0, 0), 1)}, 1, ErrInvalidOp},
		{"unknown kind", []limiter.Op{op("user:a", "r", params(algorithm.Kind(9), 1, second, 0), 1)}, 1, ErrInvalidOp},
		{"log limit", []limiter.Op{op("user:a", "r", params(algorithm.SlidingLog, algorithm.MaxLogLimit+1, second, 0), 1)}, 1, ErrInvalidOp},
		{"duplicate", []limiter.Op{op("user:a", "r", good, 1), op("user:b", "r", good, 1), op("user:a", "r", good, 1)}, 3, ErrDuplicateOp},
		{"short res", []limiter.Op{op("user:a", "r", good, 1), op("user:b", "r", good, 1)}, 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Take(context.Background(), tt.ops, make([]algorithm.Result, tt.res))
			if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Errorf("Take = %v, want %v", err, tt.want)
			}
		})
	}
	if got := s.Len(); got != 0 {
		t.Errorf("Len after failed calls = %d, want 0", got)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Take(ctx, []limiter.Op{op("user:a", "r", good, 1)}, make([]algorithm.Result, 1)); !errors.Is(err, context.Canceled) {
		t.Errorf("Take(cancelled) = %v, want %v", err, context.Canceled)
	}
}

func TestManyOps(t *testing.T) {
	s := newStore(t, newClock(conformance.Base))
	p := params(algorithm.TokenBucket, 2, minute, 0)
	var ops []limiter.Op
	for i := range 20 {
		ops = append(ops, op(fmt.Sprintf("user:%d", i%5), fmt.Sprintf("r%d", i), p, 1))
	}
	for i, want := range []bool{true, true, false} {
		for j, r := range take(t, s, ops...) {
			if r.Allowed != want {
				t.Fatalf("call %d op %d: allowed = %v, want %v", i, j, r.Allowed, want)
			}
		}
	}
	if got := s.Len(); got != 20 {
		t.Errorf("Len = %d, want 20", got)
	}
}

func TestKeysAreCopied(t *testing.T) {
	s := newStore(t, newClock(conformance.Base))
	p := params(algorithm.TokenBucket, 5, minute, 0)
	client, rule := []byte("user:alice"), []byte("rule-1")
	take(t, s, limiter.Op{Client: string(client), Rule: string(rule), Params: p, Cost: 1})
	// Reuse the bytes the way a caller with a scratch buffer would.
	buf := []byte("user:bobby")
	o := limiter.Op{Client: unsafeString(buf), Rule: "rule-1", Params: p, Cost: 1}
	take(t, s, o)
	copy(buf, "user:carol")
	take(t, s, o)
	for _, c := range []string{"user:alice", "user:bobby", "user:carol"} {
		if got, want := take(t, s, op(c, "rule-1", p, 1))[0].Remaining, int64(3); got != want {
			t.Errorf("%s remaining = %d, want %d", c, got, want)
		}
	}
}

func TestConfig(t *testing.T) {
	for _, n := range []int{-1, 3, 100, MaxShards * 2} {
		if err := (Config{Shards: n}).Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Config{Shards: %d}.Validate() = %v, want %v", n, err, ErrInvalidConfig)
		}
		if _, err := New(Config{Shards: n}); err == nil {
			t.Errorf("New(Config{Shards: %d}) succeeded, want error", n)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig().Validate() = %v", err)
	}
	s, err := New(Config{})
	if err != nil {
		t.Fatalf("New(Config{}): %v", err)
	}
	defer s.Close()
	now, err := s.Take(context.Background(), []limiter.Op{op("user:a", "r", params(algorithm.TokenBucket, 1, second, 0), 1)}, make([]algorithm.Result, 1))
	if err != nil || now.Now <= conformance.Base {
		t.Errorf("Take on default store = %d, %v", now.Now, err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

// TestExactUnderConcurrency hammers one bucket from 64 goroutines: exactly
// the limit passes.
func TestExactUnderConcurrency(t *testing.T) {
	tests := []algorithm.Params{
		params(algorithm.TokenBucket, 1000, day, 0),
		params(algorithm.LeakyBucket, 1000, day, 999),
		params(algorithm.FixedWindow, 1000, day, 0),
		params(algorithm.SlidingLog, 1000, day, 0),
		params(algorithm.SlidingWindow, 1000, day, 0),
	}
	for _, p := range tests {
		t.Run(p.Kind.String(), func(t *testing.T) {
			clock := newClock(conformance.Base)
			s := newStore(t, clock)
			const goroutines, calls = 64, 50
			var allowed atomic.Int64
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					ops := []limiter.Op{op("user:hot", "r", p, 1)}
					res := make([]algorithm.Result, 1)
					for i := range calls {
						clock.Add(1) // time moves, by far too little to refill
						if _, err := s.Take(context.Background(), ops, res); err != nil {
							t.Errorf("goroutine %d call %d: %v", g, i, err)
							return
						}
						if res[0].Allowed {
							allowed.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if got, want := allowed.Load(), int64(1000); got != want {
				t.Errorf("allowed = %d, want %d", got, want)
			}
		})
	}
}

// TestAllOrNothingUnderConcurrency runs calls on random pairs of
// overlapping clients (shards locked in every order the ops come in) and
// checks that every bucket ends with exactly what its allowed calls took.
func TestAllOrNothingUnderConcurrency(t *testing.T) {
	clock := newClock(conformance.Base)
	s, err := New(Config{Shards: 4, Clock: clock.Now, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const clients, limit = 6, 300
	p := params(algorithm.TokenBucket, limit, day, 0)
	var taken [clients]atomic.Int64
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			res := make([]algorithm.Result, 3)
			for range 200 {
				a, b := rng.IntN(clients), rng.IntN(clients-1)
				if b >= a {
					b++
				}
				c := (a + 1 + rng.IntN(clients-1)) % clients
				ops := []limiter.Op{
					op(fmt.Sprintf("user:%d", a), "r", p, 1),
					op(fmt.Sprintf("user:%d", b), "r", p, 1),
					op(fmt.Sprintf("user:%d", c), "other", p, 1),
				}
				if _, err := s.Take(context.Background(), ops, res); err != nil {
					t.Error(err)
					return
				}
				if res[0].Allowed && res[1].Allowed && res[2].Allowed {
					taken[a].Add(1)
					taken[b].Add(1)
				}
			}
		})
	}
	wg.Wait()
	for i := range clients {
		r := take(t, s, op(fmt.Sprintf("user:%d", i), "r", p, 1))[0]
		got := limit - r.Remaining
		if r.Allowed {
			got-- // this call took one
		}
		if want := taken[i].Load(); got != want {
			t.Errorf("user:%d: consumed %d, want %d (allowed calls)", i, got, want)
		}
	}
}

// TestSweepConcurrent runs sweeps and Len alongside calls, for the race
// detector.
func TestSweepConcurrent(t *testing.T) {
	clock := newClock(conformance.Base)
	s := newStore(t, clock)
	p := params(algorithm.FixedWindow, 5, second, 0)
	stop := sweepAlongside(s, clock, func() { s.Len() })
	var callers sync.WaitGroup
	for g := range 8 {
		callers.Go(func() {
			res := make([]algorithm.Result, 2)
			for i := range 2000 {
				clock.Add(1000)
				ops := []limiter.Op{
					op(fmt.Sprintf("user:%d", (g*7+i)%50), "r", p, 1),
					op(fmt.Sprintf("user:%d", (g*7+i)%50), "log", params(algorithm.SlidingLog, 5, second, 0), 1),
				}
				if _, err := s.Take(context.Background(), ops, res); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	callers.Wait()
	stop()
}

// sweepAlongside sweeps s at clock's time over and over, calling also (nil:
// nothing) after each sweep, until stop is called; stop returns once the
// sweeping has ended.
func sweepAlongside(s *Store, clock *fakeClock, also func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
				s.Sweep(clock.Now())
				if also != nil {
					also()
				}
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

func unsafeString(b []byte) string { return unsafe.String(&b[0], len(b)) }

// TestSweepShrinks empties most of a large table of every kind of bucket
// and checks that the survivors, renumbered by the compaction, keep their
// state.
func TestSweepShrinks(t *testing.T) {
	clock := newClock(conformance.Base)
	s, err := New(Config{Shards: 1, Clock: clock.Now, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	short := params(algorithm.FixedWindow, 10, second, 0)
	long := []algorithm.Params{
		params(algorithm.SlidingLog, 10, day, 0),
		params(algorithm.TokenBucket, 10, day, 0),
	}
	const n = 5000
	for i := range n {
		p := short
		if i%10 == 0 {
			p = long[i/10%2]
		}
		take(t, s, op(fmt.Sprintf("user:%d", i), "r", p, 3))
	}
	if got, want := s.Sweep(conformance.Base+10*second), n*9/10; got != want {
		t.Fatalf("Sweep = %d, want %d", got, want)
	}
	if got := len(s.shards[0].tables["r"].ents); got > n/4 {
		t.Errorf("after Sweep: %d entries in the slab, want it compacted", got)
	}
	for i := 0; i < n; i += 10 {
		if got := take(t, s, op(fmt.Sprintf("user:%d", i), "r", long[i/10%2], 1))[0].Remaining; got != 6 {
			t.Fatalf("user:%d remaining = %d, want 6", i, got)
		}
	}
}

// TestClockBeforeStart runs a store whose clock goes back before the
// instant it was created.
func TestClockBeforeStart(t *testing.T) {
	clock := newClock(conformance.Base)
	s := newStore(t, clock)
	p := params(algorithm.TokenBucket, 10, 10*second, 0)
	clock.Set(conformance.Base - minute)
	take(t, s, op("user:a", "r", p, 5))
	if got := s.Sweep(conformance.Base - 30*second); got != 0 {
		t.Errorf("Sweep before the bucket is idle = %d, want 0", got)
	}
	if got := take(t, s, op("user:a", "r", p, 1))[0].Remaining; got != 4 {
		t.Errorf("remaining = %d, want 4", got)
	}
	if got := s.Sweep(conformance.Base + second); got != 1 {
		t.Errorf("Sweep after the bucket is idle = %d, want 1", got)
	}
}

// TestIdleLogIsNew reuses an idle sliding log that was not swept.
func TestIdleLogIsNew(t *testing.T) {
	clock := newClock(conformance.Base)
	s := newStore(t, clock)
	p := params(algorithm.SlidingLog, 5, second, 0)
	take(t, s, op("user:a", "r", p, 5))
	clock.Add(10 * second)
	if got := take(t, s, op("user:a", "r", p, 2))[0]; !got.Allowed || got.Remaining != 3 {
		t.Errorf("idle log: allowed %v remaining %d, want true 3", got.Allowed, got.Remaining)
	}
}

// TestBackgroundSweeper: the sweeper drops an idle bucket within a sweep
// of its expiry. In a synctest bubble the store's clock and the sweeper's
// ticker read the bubble's time, which a Sleep moves at once.
func TestBackgroundSweeper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const sweep = 16 * time.Millisecond
		s, err := New(Config{Shards: 4, SweepInterval: sweep})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		take(t, s, op("user:a", "r", params(algorithm.FixedWindow, 1, second, 0), 1))
		if n := s.Len(); n != 1 {
			t.Fatalf("Len = %d after a take, want 1", n)
		}
		// Expiries are kept in whole seconds: the bucket is idle in the
		// second after its window, and a sweep after that finds it.
		time.Sleep(2*time.Second + 2*sweep)
		synctest.Wait()
		if n := s.Len(); n != 0 {
			t.Fatalf("Len = %d a sweep after the bucket went idle, want 0", n)
		}
	})
}

// TestPeekWritesNothing: an op of cost 0 (Envoy's hits_addend 0) reads
// its bucket and creates none; beside a denying op it is answered all the
// same, and the call takes nothing.
func TestPeekWritesNothing(t *testing.T) {
	for _, k := range algorithm.Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			s := newStore(t, newClock(conformance.Base))
			p := params(k, 3, second, 0)
			if r := take(t, s, op("user:a", "r", p, 0)); !r[0].Allowed || r[0].Remaining != p.Capacity() || r[0].ResetAfter != 0 {
				t.Errorf("peek on a new bucket = %+v, want allowed, remaining %d, reset 0", r[0], p.Capacity())
			}
			if got := s.Len(); got != 0 {
				t.Errorf("Len after a peek = %d, want 0", got)
			}
			take(t, s, op("user:a", "r", p, 1))
			want := take(t, s, op("user:a", "r", p, 0))[0]
			for range 3 {
				if r := take(t, s, op("user:a", "r", p, 0)); r[0] != want {
					t.Fatalf("peek again = %+v, want %+v", r[0], want)
				}
			}
			// Beside a denial: answered, nothing taken.
			deny := params(algorithm.FixedWindow, 1, second, 0)
			r := take(t, s, op("user:a", "r", p, 0), op("user:b", "r2", deny, 2))
			if !r[0].Allowed || r[1].Allowed {
				t.Errorf("peek beside a denial = %+v, %+v; want allowed, denied", r[0], r[1])
			}
			if got := s.Len(); got != 1 {
				t.Errorf("Len = %d, want 1 (the bucket taken from once)", got)
			}
		})
	}
}

// TestTableDroppedBySweep: a bucket taken after a sweep dropped its rule's
// emptied table lands in a table the store holds (and counts, sweeps and
// evicts), not in the one the sweep dropped, which the shard looked at
// first before.
func TestTableDroppedBySweep(t *testing.T) {
	clock := newClock(conformance.Base)
	s := newStore(t, clock)
	p := params(algorithm.FixedWindow, 10, second, 0)
	take(t, s, op("user:a", "r", p, 1))
	take(t, s, op("user:a", "r", p, 1)) // finds the table
	clock.Set(conformance.Base + 3*second)
	if got := s.Sweep(conformance.Base + 3*second); got != 1 {
		t.Fatalf("Sweep = %d, want 1", got)
	}
	take(t, s, op("user:a", "r", p, 1))
	if got := s.Len(); got != 1 {
		t.Errorf("Len = %d, want 1", got)
	}
	clock.Set(conformance.Base + 6*second)
	if got := s.Sweep(conformance.Base + 6*second); got != 1 {
		t.Errorf("second Sweep = %d, want 1 (the bucket taken after the first)", got)
	}
}

// TestChargeTakenWhateverTheCall: a charge (algorithm.Params.Charge) among
// the ops of a call is taken even when another op denies the call — it
// fits, or it does not and goes into debt — while the denying request op
// takes nothing.
func TestChargeTakenWhateverTheCall(t *testing.T) {
	s := newStore(t, newClock(conformance.Base))
	req := op("user:ai", "one", params(algorithm.FixedWindow, 1, conformance.Day, 0), 2)
	for _, cost := range []int64{1, 3} {
		charge := op("user:ai", fmt.Sprintf("charge-%d", cost), params(algorithm.TokenBucket, 2, conformance.Minute, 0), cost)
		charge.Params.Charge = true
		if res := take(t, s, req, charge); res[0].Allowed {
			t.Fatalf("a cost of 2 on a limit of 1 = %+v, want denied", res[0])
		}
		peek := charge
		peek.Cost = 0
		want := max(2-cost, 0)
		if res := take(t, s, peek); res[0].Remaining != want {
			t.Errorf("after a charge of %d on a bucket of 2: %+v, want %d remaining", cost, res[0], want)
		}
	}
	req.Cost = 1
	if res := take(t, s, req); !res[0].Allowed {
		t.Errorf("the denied request op took something: %+v", res[0])
	}
}
