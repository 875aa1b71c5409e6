package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/algorithm/conformance"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/limiter"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// newStore connects a Store with a test clock to addrs.
func newStore(t testing.TB, clock *atomic.Int64, addrs ...string) *sredis.Store {
	t.Helper()
	cfg := sredis.DefaultConfig()
	cfg.Addrs = addrs
	cfg.DenialCache = false
	if clock != nil {
		cfg.Clock = clock.Load
	}
	s, err := sredis.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConformance runs the shared tables through the Lua scripts.
func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	var clock atomic.Int64
	s := newStore(t, &clock, srv.Addr())
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
}

// TestDifferential drives random sequences of (time, cost, rule edit)
// through the Go functions and the Lua scripts and compares every decision.
func TestDifferential(t *testing.T) {
	srv := redistest.Start(t)
	var clock atomic.Int64
	s := newStore(t, &clock, srv.Addr())
	r := rand.New(rand.NewPCG(7, 11))
	windows := []int64{conformance.Millisecond, 7 * conformance.Millisecond, conformance.Second,
		3 * conformance.Second, conformance.Minute, conformance.Hour, conformance.Day, 366 * conformance.Day}
	limits := []int64{1, 2, 3, 7, 10, 100, 997, 10000, 1_000_000, 1_000_000_000}
	randParams := func(k algorithm.Kind) algorithm.Params {
		p := algorithm.Params{Kind: k, Window: windows[r.IntN(len(windows))], Limit: limits[r.IntN(len(limits))]}
		if k == algorithm.SlidingLog && p.Limit > 40 {
			p.Limit = int64(1 + r.IntN(40))
		}
		if (k == algorithm.TokenBucket || k == algorithm.LeakyBucket) && r.IntN(2) == 0 {
			p.Burst = int64(1 + r.IntN(20))
		}
		return p
	}
	sequences := 150
	if testing.Short() {
		sequences = 30
	}
	compared := 0
	for seq := 0; seq < sequences; seq++ {
		k := algorithm.Kinds[seq%len(algorithm.Kinds)]
		p := randParams(k)
		client := fmt.Sprintf("user:diff-%d", seq)
		var st algorithm.State
		now := conformance.Base + r.Int64N(conformance.Day)
		for step := 0; step < 60; step++ {
			switch x := r.IntN(40); {
			case x == 0:
				p = randParams(k) // the rule is edited
			case x == 1:
				now -= r.Int64N(p.Window + 1) // the clock jumps back
			default:
				now += r.Int64N(p.Window/3 + 1)
			}
			cost := 1 + r.Int64N(p.Capacity()+1)
			if cost > 50 && k == algorithm.SlidingLog {
				cost = 1 + r.Int64N(5)
			}
			st = compareDecision(t, s, &clock, client, p, st, now, cost, fmt.Sprintf("seq %d step %d", seq, step))
			compared++
		}
	}
	t.Logf("%d decisions identical", compared)
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
	if _, err := s.Take(context.Background(), []limiter.Op{{Client: client, Rule: "r", Params: p, Cost: cost}}, res); err != nil {
		t.Fatal(err)
	}
	got := res[0]
	got.Changed = false
	if got != want {
		t.Fatalf("%s %+v at %d cost %d: lua %+v, go %+v", where, p, now, cost, got, want)
	}
	return st
}

// TestDifferentialExtremes compares the Go functions and the Lua scripts on
// token buckets at the edges of the rules' range: a full-again instant past
// 2051 (stored packed, not as a decimal), a debt over the 2^62 ns cap, and
// tokens much smaller than a nanosecond.
func TestDifferentialExtremes(t *testing.T) {
	srv := redistest.Start(t)
	var clock atomic.Int64
	s := newStore(t, &clock, srv.Addr())
	year := 366 * conformance.Day
	cases := []algorithm.Params{
		{Kind: algorithm.TokenBucket, Limit: 1, Window: year, Burst: 40},            // F up to 40 years ahead
		{Kind: algorithm.TokenBucket, Limit: 1, Window: year, Burst: 1_000_000_000}, // debt capped at 2^62 ns
		{Kind: algorithm.TokenBucket, Limit: 1_000_000_000, Window: conformance.Millisecond},
		{Kind: algorithm.TokenBucket, Limit: 997, Window: year, Burst: 1_000_000_000},
	}
	r := rand.New(rand.NewPCG(13, 17))
	packed := 0
	for i, p := range cases {
		client := fmt.Sprintf("user:extreme-%d", i)
		var st algorithm.State
		now := conformance.Base
		for step := 0; step < 40; step++ {
			switch x := r.IntN(10); {
			case x == 0:
				now -= r.Int64N(conformance.Day)
			case x < 5:
				now += r.Int64N(conformance.Day)
			}
			cost := 1 + r.Int64N(min(p.Capacity(), 60))
			if r.IntN(8) == 0 {
				cost = p.Capacity()
			}
			st = compareDecision(t, s, &clock, client, p, st, now, cost, fmt.Sprintf("step %d", step))
			if v := do(t, srv, "get", s.Key(client, "r")); len(v) > 0 && v[0] == 1 {
				packed++
			}
		}
	}
	if packed == 0 {
		t.Fatal("no state stored packed: the far-future fallback was not exercised")
	}
	t.Logf("%d decisions identical, %d with the state packed", 40*len(cases), packed)
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
