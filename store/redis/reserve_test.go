package redis_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/seam/redisstore"
	"github.com/sluicehq/sluice/internal/testkit/conformance"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store/memory"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// TestReserveMatchesMemory runs the same random reservations (and a few
// checks) through reserve.lua, on both of the store's paths, and the
// embedded store, on one test clock: every answer, wait and time must be
// identical.
func TestReserveMatchesMemory(t *testing.T) {
	srv := redistest.Start(t)
	for _, path := range scriptPaths {
		t.Run(path.command, func(t *testing.T) {
			do(t, srv, "flushall")
			var clock atomic.Int64
			rs := newStorePath(t, &clock, path.evalsha, srv.Addr())
			checkReservePath(t, rs, path.command)
			cmd := strings.ToLower(path.command)
			runs0, _ := scriptCalls(t, srv)
			cmd0 := commandCalls(t, srv, cmd)
			n := reserveMatchesMemory(t, rs, &clock)
			// every reservation and check one run, by the path's command
			runs, _ := scriptCalls(t, srv)
			if runs-runs0 != n || commandCalls(t, srv, cmd)-cmd0 != n {
				t.Fatalf("%d FCALL+EVALSHA runs, %d of them %s, for %d calls; want one %s each", runs-runs0, commandCalls(t, srv, cmd)-cmd0, path.command, n, path.command)
			}
		})
	}
}

// checkReservePath fails the test unless s runs reserve.lua with command.
func checkReservePath(t testing.TB, s *sredis.Store, command string) {
	t.Helper()
	if got := redisstore.Command(s); got != command {
		t.Fatalf("store runs reserve.lua with %s, want %s", got, command)
	}
}

// reserveMatchesMemory is TestReserveMatchesMemory on one store; it
// returns how many calls it made to rs.
func reserveMatchesMemory(t *testing.T, rs *sredis.Store, clock *atomic.Int64) int64 {
	calls := int64(0)
	ms, err := memory.New(memory.Config{Clock: clock.Load, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ms.Close() })
	r := rand.New(rand.NewPCG(5, 6))
	windows := []int64{conformance.Millisecond, 7 * conformance.Millisecond, conformance.Second, 3 * conformance.Second, conformance.Minute, conformance.Hour}
	limits := []int64{1, 2, 3, 7, 10, 100, 997, 10000}
	kinds := []algorithm.Kind{algorithm.TokenBucket, algorithm.LeakyBucket}
	ctx := context.Background()
	waited, denied := 0, 0
	for iter := range 60 {
		client := fmt.Sprintf("user:diff-%d", iter)
		nops := 1 + r.IntN(2)
		var ps []algorithm.Params
		for range nops {
			p := algorithm.Params{Kind: kinds[r.IntN(2)], Window: windows[r.IntN(len(windows))], Limit: limits[r.IntN(len(limits))]}
			if r.IntN(2) == 0 {
				p.Burst = int64(1 + r.IntN(5))
			}
			ps = append(ps, p)
		}
		now := conformance.Base + r.Int64N(conformance.Day)
		for step := range 30 {
			now += r.Int64N(ps[0].Window/(2*ps[0].Limit) + 2)
			clock.Store(now)
			ops := make([]limiter.Op, nops)
			for i, p := range ps {
				ops[i] = limiter.Op{Client: client, Rule: fmt.Sprintf("r%d", i), Params: p, Cost: 1 + r.Int64N(p.Capacity()+1), Shadow: i == 1 && r.IntN(4) == 0}
			}
			if r.IntN(10) == 0 { // a check between reservations: both stores clamp alike
				gr, wr := make([]algorithm.Result, nops), make([]algorithm.Result, nops)
				calls++
				gi, err1 := rs.Take(ctx, ops, gr)
				wi, err2 := ms.Take(ctx, ops, wr)
				if err1 != nil || err2 != nil || gi.Now != wi.Now || !equalResults(gr, wr) {
					t.Fatalf("iter %d step %d Take: redis %+v %+v %v, memory %+v %+v %v", iter, step, gi, gr, err1, wi, wr, err2)
				}
				continue
			}
			maxWait := []int64{0, conformance.Millisecond, ps[0].Window / 2, 2 * ps[0].Window, conformance.Hour}[r.IntN(5)]
			gr, wr := make([]algorithm.Result, nops), make([]algorithm.Result, nops)
			calls++
			gi, gw, err1 := rs.Reserve(ctx, ops, gr, maxWait)
			wi, ww, err2 := ms.Reserve(ctx, ops, wr, maxWait)
			if err1 != nil || err2 != nil {
				t.Fatalf("iter %d step %d: Reserve errors: redis %v, memory %v", iter, step, err1, err2)
			}
			if gi.Now != wi.Now || gw != ww || !equalResults(gr, wr) {
				t.Fatalf("iter %d step %d %+v maxWait %d:\n redis  now %d wait %d %+v\n memory now %d wait %d %+v",
					iter, step, ops, maxWait, gi.Now, gw, gr, wi.Now, ww, wr)
			}
			if gw > 0 {
				waited++
			}
			for i := range gr {
				if !gr[i].Allowed && !ops[i].Shadow {
					denied++
					break
				}
			}
		}
	}
	if waited < 50 || denied < 50 {
		t.Fatalf("%d reservations waited and %d were denied: too few to compare", waited, denied)
	}
	return calls
}

// A node that lost the function library (FUNCTION FLUSH, a restart
// without persistence) gets it again from the first reservation, as from
// the first check: one FCALL answered "Function not found", the retry.
func TestReserveNoFunction(t *testing.T) {
	srv, s := startStore(t)
	checkReservePath(t, s, "FCALL")
	ops := []limiter.Op{{Client: "user:nofunction", Rule: "r", Params: paramsOf(algorithm.LeakyBucket, 10, conformance.Second), Cost: 1}}
	do(t, srv, "function", "flush")
	fcall0, eval0 := commandCalls(t, srv, "fcall"), commandCalls(t, srv, "eval")
	var waits []int64
	for range 3 {
		res := make([]algorithm.Result, 1)
		_, wait, err := s.Reserve(context.Background(), ops, res, conformance.Second)
		if err != nil || !res[0].Allowed {
			t.Fatalf("Reserve after FUNCTION FLUSH = %+v, %v; want allowed", res[0], err)
		}
		waits = append(waits, wait)
	}
	if want := []int64{0, 0, 100_000}; !slices.Equal(waits, want) {
		t.Fatalf("waits %v, want %v", waits, want)
	}
	checkReloaded(t, srv, "sluice_reserve_", fcall0, eval0, 4, "one answered \"Function not found\", the retry, two more")
}

func equalResults(a, b []algorithm.Result) bool {
	for i := range a {
		x, y := a[i], b[i]
		x.Changed, y.Changed = false, false
		if x != y {
			return false
		}
	}
	return true
}

// Two stores (two sluice instances) on one Redis, on the server's clock,
// reserving at once from many goroutines: the slots (the server's now plus
// the wait) are the leaky bucket's, never more than its burst at once and
// one each interval after, across both instances.
func TestReserveSharedAcrossInstances(t *testing.T) {
	srv := redistest.Start(t)
	stores := []*sredis.Store{newStore(t, nil, srv.Addr()), newStore(t, nil, srv.Addr())}
	p := algorithm.Params{Kind: algorithm.LeakyBucket, Limit: 50, Window: conformance.Second} // 20 ms apart, 2 at once
	const n = 80
	slots := make([]int64, n)
	var longest atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := make([]algorithm.Result, 1)
			ops := []limiter.Op{{Client: "user:api.partner.example", Rule: "egress", Params: p, Cost: 1}}
			info, wait, err := stores[i%2].Reserve(context.Background(), ops, res, 5*conformance.Second)
			if err != nil || !res[0].Allowed {
				t.Errorf("Reserve = %+v, %v", res[0], err)
				return
			}
			slots[i] = info.Now + wait
			for w := longest.Load(); wait > w && !longest.CompareAndSwap(w, wait); w = longest.Load() {
			}
		}()
	}
	wg.Wait()
	// The key outlives every slot handed out: its expiry counts from now.
	if pttl, err := strconv.ParseInt(do(t, srv, "pttl", redisstore.Key(stores[0], "user:api.partner.example", "egress")), 10, 64); err != nil || pttl*1000 <= longest.Load() {
		t.Fatalf("PTTL %d ms (%v), want beyond the longest wait %d µs", pttl, err, longest.Load())
	}
	slices.Sort(slots)
	for i := 2; i < n; i++ {
		if d := slots[i] - slots[i-2]; d < 20_000 {
			t.Fatalf("slots %d and %d are %d µs apart, want at least 20000 (two at once, then one each 20 ms)", i-2, i, d)
		}
	}
}

// On a Redis Cluster a reservation is one script on the shard of its
// client; rules keyed by two clients are refused.
func TestReserveCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	var clock atomic.Int64
	clock.Store(conformance.Base)
	s := openStore(t, func(cfg *sredis.Config) { cfg.Clock = clock.Load; cfg.NoDenialCache = true }, c.Addrs()...)
	p := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 10, Window: conformance.Second, Burst: 1}
	ops := []limiter.Op{
		{Client: "user:h", Rule: "a", Params: p, Cost: 1},
		{Client: "user:h", Rule: "b", Params: algorithm.Params{Kind: algorithm.LeakyBucket, Limit: 5, Window: conformance.Second}, Cost: 1},
	}
	var waits []int64
	for range 4 {
		res := make([]algorithm.Result, 2)
		_, wait, err := s.Reserve(context.Background(), ops, res, conformance.Second)
		if err != nil || !res[0].Allowed || !res[1].Allowed {
			t.Fatalf("Reserve = %+v, %v", res, err)
		}
		waits = append(waits, wait)
	}
	// a: one token, then one each 100 ms; b: two at once, then one each 200 ms.
	if want := []int64{0, 100_000, 200_000, 400_000}; !slices.Equal(waits, want) {
		t.Fatalf("waits %v, want %v", waits, want)
	}
	ops[1].Client = "ip:192.0.2.1"
	_, _, err := s.Reserve(context.Background(), ops, make([]algorithm.Result, 2), conformance.Second)
	if !errors.Is(err, sredis.ErrReserveClients) {
		t.Fatalf("two clients on a cluster: err %v, want ErrReserveClients", err)
	}
}

// BenchmarkReserve measures reserve.lua's own time per decision (INFO
// commandstats), beside BenchmarkTake's take.lua on the same kind of
// bucket: 100 calls a second, a call every 7 ms. "queued" reserves
// with a max wait of one second, so the bucket holds a queue of slots;
// "room" with none, so it is a check's work.
func BenchmarkReserve(b *testing.B) {
	srv := redistest.Start(b)
	var clock atomic.Int64
	s := newStore(b, &clock, srv.Addr())
	for _, k := range []algorithm.Kind{algorithm.TokenBucket, algorithm.LeakyBucket} {
		for _, mode := range []struct {
			name    string
			maxWait int64
		}{{"room", 0}, {"queued", conformance.Second}} {
			b.Run(k.String()+"/"+mode.name, func(b *testing.B) {
				ops := []limiter.Op{{Client: "user:bench-" + mode.name, Rule: fmt.Sprint(k), Params: algorithm.Params{Kind: k, Limit: 100, Window: conformance.Second}, Cost: 1}}
				res := make([]algorithm.Result, 1)
				benchCalls(b, srv, &clock, redisstore.Command(s), func() error {
					_, _, err := s.Reserve(context.Background(), ops, res, mode.maxWait)
					return err
				})
			})
		}
	}
}

// Reservations made at the same time share script runs on a standalone
// server, and each is still exact: on a stopped clock, every bucket hands
// out exactly its slots (two at once, then one each 20 ms), whatever the
// runs the calls fell into; a call with a second (shadow) rule gets both
// answers; a reservation that does not fit takes nothing.
func TestReserveBatched(t *testing.T) {
	srv, s := startStore(t)
	p := algorithm.Params{Kind: algorithm.LeakyBucket, Limit: 50, Window: conformance.Second}
	ctx := context.Background()
	full := []limiter.Op{{Client: "user:full", Rule: "egress", Params: p, Cost: 1}}
	for range 5 { // slots 0, 0, 20, 40, 60 ms
		if _, _, err := s.Reserve(ctx, full, make([]algorithm.Result, 1), conformance.Second); err != nil {
			t.Fatal(err)
		}
	}
	const buckets, per, denials = 8, 40, 40
	runs0, _ := scriptCalls(t, srv)
	waits := make([][]int64, buckets)
	var mu sync.Mutex
	var wg sync.WaitGroup
	release := make(chan struct{})
	for i := range buckets*per + denials {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-release
			res := make([]algorithm.Result, 2)
			if i >= buckets*per { // the full bucket, no wait
				_, wait, err := s.Reserve(ctx, full, res, 0)
				if err != nil || res[0].Allowed || wait != 0 || res[0].RetryAfter != 80_000 {
					t.Errorf("Reserve on a full bucket, no wait = %+v, wait %d, %v; want denied, retry after 80 ms", res[0], wait, err)
				}
				return
			}
			b := i % buckets
			ops := []limiter.Op{{Client: fmt.Sprintf("user:batched-%d", b), Rule: "egress", Params: p, Cost: 1}}
			if i%2 == 1 {
				ops = append(ops, limiter.Op{Client: fmt.Sprintf("user:shadow-%d", i), Rule: "egress", Params: p, Cost: 1, Shadow: true})
			}
			_, wait, err := s.Reserve(ctx, ops, res[:len(ops)], 10*conformance.Second)
			if err != nil || !res[0].Allowed || (len(ops) == 2 && (!res[1].Allowed || res[1].Remaining != 1)) {
				t.Errorf("Reserve = %+v, %v", res, err)
				return
			}
			mu.Lock()
			waits[b] = append(waits[b], wait)
			mu.Unlock()
		}()
	}
	close(release)
	wg.Wait()
	if t.Failed() {
		return
	}
	runs, _ := scriptCalls(t, srv)
	if n := runs - runs0; n >= buckets*per+denials {
		t.Fatalf("%d script runs for %d reservations made at once: none shared a run", n, buckets*per+denials)
	}
	for b, w := range waits {
		slices.Sort(w)
		want := []int64{0}
		for k := range per - 1 {
			want = append(want, int64(k)*20_000)
		}
		if !slices.Equal(w, want) {
			t.Fatalf("bucket %d: waits %v, want %v", b, w, want)
		}
	}
	// The denied reservations took nothing: the next slot is still 80 ms.
	if _, wait, err := s.Reserve(ctx, full, make([]algorithm.Result, 1), conformance.Second); err != nil || wait != 80_000 {
		t.Fatalf("after the denials, Reserve wait = %d, %v; want 80000", wait, err)
	}
}
