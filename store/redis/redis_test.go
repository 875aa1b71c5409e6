package redis_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
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

// newStore connects a Store with a test clock to addrs.
func newStore(t testing.TB, clock *atomic.Int64, addrs ...string) *sredis.Store {
	t.Helper()
	return newStorePath(t, clock, false, addrs...)
}

// newStorePath is newStore with Config.Evalsha set to evalsha.
func newStorePath(t testing.TB, clock *atomic.Int64, evalsha bool, addrs ...string) *sredis.Store {
	t.Helper()
	cfg := sredis.DefaultConfig()
	cfg.Addrs = addrs
	cfg.NoDenialCache = true
	cfg.Evalsha = evalsha
	if clock != nil {
		cfg.Clock = clock.Load
	}
	s, err := sredis.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConformance runs the shared tables through the Lua scripts.
func TestConformance(t *testing.T) {
	for _, path := range scriptPaths {
		t.Run(path.command, func(t *testing.T) {
			clock, s := startPathStore(t, path.evalsha, path.command)
			n := 0
			conformance.Run(t, func(t *testing.T) conformance.Bucket {
				n++
				client := fmt.Sprintf("user:conformance-%d", n)
				return func(p algorithm.Params, now, cost int64) (algorithm.Result, error) {
					clock.Store(now)
					ops := []limiter.Op{{Client: client, Rule: "r", Params: p, Cost: cost}}
					res := make([]algorithm.Result, 1)
					got, err := s.Take(context.Background(), ops, res)
					if err != nil {
						return algorithm.Result{}, err
					}
					if got.Now != now {
						t.Errorf("Take now = %d, want %d", got.Now, now)
					}
					res[0].Changed = false
					return res[0], nil
				}
			})
		})
	}
}

// TestDifferential drives random sequences of (time, cost, rule edit)
// through the Go functions and the Lua scripts and compares every decision.
func TestDifferential(t *testing.T) {
	for _, path := range scriptPaths {
		t.Run(path.command, func(t *testing.T) {
			clock, s := startPathStore(t, path.evalsha, path.command)
			r := rand.New(rand.NewPCG(7, 11))
			sequences := 150
			if testing.Short() {
				sequences = 30
			}
			compared := 0
			for seq := 0; seq < sequences; seq++ {
				k := algorithm.Kinds()[seq%len(algorithm.Kinds())]
				p := conformance.RandomParams(r, k)
				charge := seq%3 == 1 && algorithm.CanCharge(k) // every call a charge (Params.Charge)
				p.Charge = charge
				client := fmt.Sprintf("user:diff-%d", seq)
				var st algorithm.State
				now := conformance.Base + r.Int64N(conformance.Day)
				for step := 0; step < 60; step++ {
					switch x := r.IntN(40); {
					case x == 0:
						p = conformance.RandomParams(r, k) // the rule is edited
						p.Charge = charge
					case x == 1:
						now -= r.Int64N(p.Window + 1) // the clock jumps back
					default:
						now += r.Int64N(p.Window/3 + 1)
					}
					cost := 1 + r.Int64N(p.Capacity()+1)
					if cost > 50 && k == algorithm.SlidingLog {
						cost = 1 + r.Int64N(5)
					}
					st = compareDecision(t, s, clock, client, p, st, now, cost, fmt.Sprintf("seq %d step %d", seq, step))
					compared++
				}
			}
			t.Logf("%d decisions identical", compared)
		})
	}
}

// compareDecision decides a call of cost at now on client's bucket of rule
// p with the Go function (from state st) and with the Lua script (through
// s, its clock set to now), fails the test if the results differ, and
// returns the Go function's new state.
func compareDecision(t *testing.T, s *sredis.Store, clock *atomic.Int64, client string, p algorithm.Params, st algorithm.State, now, cost int64, where string) algorithm.State {
	t.Helper()
	want, ns := algorithm.Apply(p, st, now, cost)
	if want.Changed {
		st = ns
	}
	want.Changed = false
	clock.Store(now)
	res := make([]algorithm.Result, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := s.Take(ctx, []limiter.Op{{Client: client, Rule: "r", Params: p, Cost: cost}}, res); err != nil {
		t.Fatalf("%s %+v at %d cost %d: %v", where, p, now, cost, err)
	}
	got := res[0]
	got.Changed = false
	if got != want {
		t.Fatalf("%s %+v at %d cost %d: lua %+v, go %+v", where, p, now, cost, got, want)
	}
	return st
}

// TestDifferentialExtremes compares the Go functions and the Lua scripts on
// rules from the whole accepted range at instants from 1970 to the last an
// int64 of ns can name (2262-04-11): the longest refills (40 × 366 days),
// bursts of 10^9, tokens of 10^-6 µs, clocks that jump by years both ways,
// rule edits. Every decision must be identical (the Go functions are
// checked never to over-admit in package algorithm), and no script may run
// long: each call has a deadline of a second, where a script that loops
// would hold Redis BUSY.
func TestDifferentialExtremes(t *testing.T) {
	for _, path := range scriptPaths {
		t.Run(path.command, func(t *testing.T) {
			clock, s := startPathStore(t, path.evalsha, path.command)
			const last = math.MaxInt64 / 1000 // 2262-04-11T23:47:16.854775Z, in µs
			year := 366 * conformance.Day
			r := rand.New(rand.NewPCG(13, 17))
			// The cases that once decided wrongly, at the largest refill a rule may now have.
			fixed := []struct {
				p   algorithm.Params
				now int64
			}{
				{algorithm.Params{Kind: algorithm.TokenBucket, Limit: 1, Window: year, Burst: 40}, 4_979_347_200_000_000},  // 2127-10-13
				{algorithm.Params{Kind: algorithm.TokenBucket, Limit: 7, Window: year, Burst: 280}, 5_048_956_800_000_000}, // 2129-12-31
				{algorithm.Params{Kind: algorithm.LeakyBucket, Limit: 1, Window: year, Burst: 39}, last - 41*year},
				{algorithm.Params{Kind: algorithm.TokenBucket, Limit: 1_000_000_000, Window: year, Burst: 1_000_000_000}, last - 3*year},
				{algorithm.Params{Kind: algorithm.LeakyBucket, Limit: 1, Window: conformance.Second, Burst: 1_000_000_000}, last - 40*year},
			}
			packed, compared := 0, 0
			for seq := 0; seq < 200+len(fixed); seq++ {
				var p algorithm.Params
				var now int64
				if seq < len(fixed) {
					p, now = fixed[seq].p, fixed[seq].now
				} else {
					p = conformance.ExtremeParams(r, algorithm.Kinds()[seq%len(algorithm.Kinds())])
					switch r.IntN(3) {
					case 0:
						now = 1 + r.Int64N(year)
					case 1:
						now = last - r.Int64N(45*year)
					default:
						now = 1 + r.Int64N(last)
					}
				}
				charge := seq%3 == 1 && algorithm.CanCharge(p.Kind)
				p.Charge = charge
				client := fmt.Sprintf("user:extreme-%d", seq)
				var st algorithm.State
				for step := 0; step < 40; step++ {
					switch x := r.IntN(20); {
					case x == 0 && seq >= len(fixed):
						p = conformance.ExtremeParams(r, p.Kind) // the rule is edited
						p.Charge = charge
					case x == 1:
						now -= r.Int64N(max(p.Window, conformance.Day)) // the clock jumps back
					case x < 4:
						now += r.Int64N(algorithm.MaxRefill)
					default:
						now += r.Int64N(p.Window/int64(1+r.IntN(8)) + 1)
					}
					now = max(1, min(now, last))
					cost := 1 + r.Int64N(min(p.Capacity(), 1+r.Int64N(3)*p.Capacity()/2))
					if r.IntN(8) == 0 {
						cost = p.Capacity() + r.Int64N(2)
					}
					st = compareDecision(t, s, clock, client, p, st, now, cost, fmt.Sprintf("seq %d step %d", seq, step))
					compared++
					c := redisstore.Client(s)
					if v, err := c.Do(context.Background(), c.B().Get().Key(redisstore.Key(s, client, "r")).Build()).ToString(); err == nil && len(v) > 0 && v[0] >= 17 && v[0] <= 20 {
						packed++
					}
				}
			}
			if packed == 0 {
				t.Fatal("no state stored packed: the far-from-2020 encoding was not exercised")
			}
			t.Logf("%d decisions identical, %d with the state packed", compared, packed)
		})
	}
}

// TestAdvice: the store reads the server's settings and names the ones that
// hurt sluice: a low hz (long expiry cycles) and an eviction policy that
// evicts live buckets.
func TestAdvice(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, nil, srv.Addr())
	steps := []struct {
		set  []string
		want []string // substrings, one per line of advice
	}{
		{nil, []string{"hz 10: expiring keys may hold the server for up to 25 ms"}},
		{[]string{"hz", "100"}, nil},
		{[]string{"maxmemory-policy", "allkeys-lru"}, nil}, // no maxmemory: nothing is evicted
		{[]string{"maxmemory", "100mb"}, []string{"maxmemory-policy allkeys-lru: an evicted bucket starts full"}},
		{[]string{"maxmemory-policy", "volatile-ttl"}, nil},
		{[]string{"hz", "50"}, []string{"hz 50: expiring keys may hold the server for up to 5 ms"}},
	}
	for i, st := range steps {
		if st.set != nil {
			do(t, srv, append([]string{"config", "set"}, st.set...)...)
		}
		got := s.Advice(context.Background())
		if len(got) != len(st.want) {
			t.Fatalf("step %d (%v): Advice = %q, want %d lines", i, st.set, got, len(st.want))
		}
		for k, w := range st.want {
			if !strings.Contains(got[k], w) || !strings.Contains(got[k], srv.Addr()) {
				t.Errorf("step %d: advice %q, want it to name %s and say %q", i, got[k], srv.Addr(), w)
			}
		}
	}
}

// TestErrorKind: a real error reply of Redis is named "redis", an error the
// store does not know is left to the caller ("").
func TestErrorKind(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, nil, srv.Addr())
	c := redisstore.Client(s)
	err := c.Do(context.Background(), c.B().Arbitrary("NOSUCHCOMMAND").Build()).Error()
	if err == nil {
		t.Fatal("an unknown command succeeded")
	}
	if got := s.ErrorKind(err); got != "redis" {
		t.Errorf("ErrorKind(%v) = %q, want redis", err, got)
	}
	if got := s.ErrorKind(fmt.Errorf("x: %w", context.Canceled)); got != "" {
		t.Errorf("ErrorKind(canceled) = %q, want \"\"", got)
	}
}

// BenchmarkTake measures one decision through take.lua on a real
// redis-server, per path (FCALL of the function library, EVALSHA) and
// algorithm, one call at a time (no batching), on a warm bucket of 100
// calls a second that alternates between allowed and denied.
func BenchmarkTake(b *testing.B) {
	srv := redistest.Start(b)
	for _, path := range scriptPaths {
		var clock atomic.Int64
		s := newStorePath(b, &clock, path.evalsha, srv.Addr())
		checkPath(b, s, path.command)
		for _, k := range algorithm.Kinds() {
			b.Run(path.command+"/"+k.String(), func(b *testing.B) {
				ops := []limiter.Op{{Client: "user:bench", Rule: fmt.Sprint(k), Params: algorithm.Params{Kind: k, Limit: 100, Window: conformance.Second}, Cost: 1}}
				res := make([]algorithm.Result, 1)
				benchCalls(b, srv, &clock, path.command, func() error {
					_, err := s.Take(context.Background(), ops, res)
					return err
				})
			})
		}
	}
}
