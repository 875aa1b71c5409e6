package redis_test

import (
	"context"
	"fmt"
	"strconv"
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

// TestDenialCacheNeverDeniesEarly: the local denial cache never denies a
// call Redis would allow. Two stores share one server on its real clock:
// goroutines hammer a small bucket through the cached one, and each call it
// denies locally is sent at once through the uncached one, which asks
// Redis. Whenever that second answer was computed before the cache's
// deadline (it returned before the first call's start + RetryAfter), Redis
// must deny too. The cache ends its deadlines 0.1 % early for clocks that
// run apart; the test reports how far Redis's clock moved against this
// process's monotonic clock, so that a failure tells a clock that jumped
// from a cache that is wrong.
func TestDenialCacheNeverDeniesEarly(t *testing.T) {
	srv := redistest.Start(t)
	// Leases off: a hot bucket's denials would come from its lease, not
	// from the cache under test.
	cached := openStore(t, func(c *sredis.Config) { c.NoLeases = true }, srv.Addr())
	direct := openStore(t, func(c *sredis.Config) { c.NoDenialCache, c.NoLeases = true, true }, srv.Addr())
	base := time.Now()
	clock := func() time.Duration { return clockOffset(t, direct, base) }
	for _, p := range []algorithm.Params{
		paramsOf(algorithm.TokenBucket, 5, 200*conformance.Millisecond),
		paramsOf(algorithm.FixedWindow, 5, 200*conformance.Millisecond),
		paramsOf(algorithm.LeakyBucket, 5, 200*conformance.Millisecond),
	} {
		t.Run(p.Kind.String(), func(t *testing.T) {
			op := []limiter.Op{{Client: "user:hammer-" + p.Kind.String(), Rule: "r", Params: p, Cost: 1}}
			offset0 := clock()
			var local, compared, allowed, late atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			stop := time.Now().Add(1500 * time.Millisecond)
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res := make([]algorithm.Result, 1)
					check := make([]algorithm.Result, 1)
					for n := 0; n < 20000 && time.Now().Before(stop); n++ {
						start := time.Now()
						info, err := cached.Take(context.Background(), op, res)
						if err != nil {
							errs <- err
							return
						}
						if res[0].Allowed {
							allowed.Add(1)
						}
						if info.Origin != limiter.OriginLocalDenialCache {
							continue
						}
						local.Add(1)
						if _, err := direct.Take(context.Background(), op, check); err != nil {
							errs <- err
							return
						}
						if time.Since(start) >= time.Duration(res[0].RetryAfter)*time.Microsecond {
							if check[0].Allowed {
								late.Add(1)
							}
							continue // Redis may have answered after the deadline
						}
						compared.Add(1)
						if check[0].Allowed {
							errs <- fmt.Errorf("cache denied with retry after %d µs, but Redis allowed the same call %s later",
								res[0].RetryAfter, time.Since(start))
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			drift := clock() - offset0
			for err := range errs {
				t.Fatalf("%v (Redis's clock moved %v against this process's during the test)", err, drift)
			}
			t.Logf("%d allowed, %d denied locally, %d of them checked against Redis before their deadline (%d checks after it were allowed); Redis's clock moved %v against this process's",
				allowed.Load(), local.Load(), compared.Load(), late.Load(), drift)
			if compared.Load() < 20 {
				t.Fatalf("only %d local denials checked against Redis, want ≥ 20", compared.Load())
			}
		})
	}
}

// clockOffset returns Redis's TIME minus this process's clock, read as base
// plus the monotonic time since, at the middle of the round trip: its change
// over a test is how far the two clocks moved apart. It takes the closest
// of a few reads.
func clockOffset(t testing.TB, s *sredis.Store, base time.Time) time.Duration {
	t.Helper()
	c := redisstore.Client(s)
	best, bestRTT := time.Duration(0), time.Duration(1<<62)
	for range 5 {
		t0 := time.Since(base)
		v, err := c.Do(context.Background(), c.B().Time().Build()).AsStrSlice()
		t1 := time.Since(base)
		if err != nil || len(v) != 2 {
			t.Fatalf("TIME = %v, %v", v, err)
		}
		sec, err1 := strconv.ParseInt(v[0], 10, 64)
		usec, err2 := strconv.ParseInt(v[1], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("TIME = %v", v)
		}
		redis := time.Unix(sec, usec*1000)
		local := base.Add((t0 + t1) / 2)
		if rtt := t1 - t0; rtt < bestRTT {
			best, bestRTT = redis.Sub(local), rtt
		}
	}
	return best
}

// TestDenialCacheRuleEdit: a cached denial holds only for the params it was
// made under: an edited rule goes to Redis at once, where a raised limit
// applies to the existing bucket (a fixed window: its count of 1 is under
// the new limit). The edit voids the entry even when it is undone: under
// the other params the bucket may have gained capacity (a token bucket
// refilling faster), so the old deadline no longer holds.
func TestDenialCacheRuleEdit(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, nil, srv.Addr())
	op := limiter.Op{Client: "user:edit", Rule: "r", Params: paramsOf(algorithm.FixedWindow, 1, conformance.Day), Cost: 1}
	steps := []struct {
		limit   int64
		allowed bool
		source  limiter.Origin
	}{
		{1, true, limiter.OriginStore},
		{1, false, limiter.OriginStore},            // Redis denies: cached
		{1, false, limiter.OriginLocalDenialCache}, // same rule: local
		{100, true, limiter.OriginStore},           // limit raised: to Redis, allowed
		{100, true, limiter.OriginStore},           // and the bucket keeps the new limit
		{1, false, limiter.OriginStore},            // lowered again: the old entry is void, Redis denies
		{1, false, limiter.OriginLocalDenialCache}, // cached under the lowered rule
	}
	for i, st := range steps {
		o := op
		o.Params.Limit = st.limit
		before := s.LocalDenials()
		res, info := take(t, s, o)
		if res[0].Allowed != st.allowed || info.Origin != st.source {
			t.Fatalf("step %d (limit %d) = %+v from %v, want allowed %v from %v", i, st.limit, res[0], info.Origin, st.allowed, st.source)
		}
		if local := s.LocalDenials() - before; (local == 1) != (st.source == limiter.OriginLocalDenialCache) {
			t.Fatalf("step %d: LocalDenials grew by %d", i, local)
		}
	}
}

// abuse sends calls × goroutines calls of one client (limit 10 a minute)
// through s and returns the scripts the server ran for them.
func abuse(t testing.TB, srv *redistest.Server, s *sredis.Store, client string, goroutines, calls int) int64 {
	t.Helper()
	op := []limiter.Op{{Client: client, Rule: "r", Params: paramsOf(algorithm.TokenBucket, 10, conformance.Minute), Cost: 1}}
	sha0, eval0 := scriptCalls(t, srv)
	start := time.Now()
	got := takeConcurrently(t, s, goroutines, calls, func(int) []limiter.Op { return op })
	// A token refills every 6 s: a loaded machine's run may see some.
	if refilled := int64(time.Since(start)/(6*time.Second)) + 1; got < 10 || got > 10+refilled {
		t.Fatalf("abusive client got %d calls through in %v, want 10 (up to %d if tokens refilled)", got, time.Since(start).Round(time.Millisecond), 10+refilled)
	}
	sha1, eval1 := scriptCalls(t, srv)
	return sha1 + eval1 - sha0 - eval0
}

// TestDenialCacheSparesRedis: one abusive client, 256 goroutines, limit 10
// a minute. Without the cache every call is a script run; with it, Redis
// sees the calls until the first denial is known, then none.
func TestDenialCacheSparesRedis(t *testing.T) {
	srv := redistest.Start(t)
	const goroutines, calls = 256, 40
	// Leases off: they would spare Redis these calls too (see
	// TestLeaseFleetExact), and this is the cache's test.
	noLeases := func(c *sredis.Config) { c.NoLeases = true }
	without := abuse(t, srv, openStore(t, func(c *sredis.Config) { c.NoDenialCache, c.NoLeases = true, true }, srv.Addr()), "user:abuser-1", goroutines, calls)
	with := abuse(t, srv, openStore(t, noLeases, srv.Addr()), "user:abuser-2", goroutines, calls)
	t.Logf("%d calls of one client: %d scripts in Redis without the denial cache, %d with it", goroutines*calls, without, with)
	if with*20 > without {
		t.Fatalf("with the denial cache Redis ran %d scripts, without %d: want at most 1/20", with, without)
	}
}

// BenchmarkAbusiveClient measures what one abusive client (256 goroutines,
// limit 10 a minute) costs Redis, in scripts per call, with and without the
// local denial cache.
func BenchmarkAbusiveClient(b *testing.B) {
	srv := redistest.Start(b)
	for _, cache := range []bool{false, true} {
		b.Run(fmt.Sprintf("denial_cache=%v", cache), func(b *testing.B) {
			s := openStore(b, func(c *sredis.Config) { c.NoDenialCache = !cache }, srv.Addr())
			op := []limiter.Op{{Client: fmt.Sprintf("user:bench-abuser-%v", cache), Rule: "r",
				Params: paramsOf(algorithm.TokenBucket, 10, conformance.Minute), Cost: 1}}
			sha0, eval0 := scriptCalls(b, srv)
			b.SetParallelism(128) // 256 goroutines on 2 cores
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				res := make([]algorithm.Result, 1)
				for pb.Next() {
					if _, err := s.Take(context.Background(), op, res); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			sha1, eval1 := scriptCalls(b, srv)
			b.ReportMetric(float64(sha1+eval1-sha0-eval0)/float64(b.N), "scripts/op")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

// TestDenialCacheShared: a cache given to several stores (Config.Denials)
// outlives the store that filled it: a new store — a reconnect, onto a
// Redis that lost every key — denies the caller locally, without a script,
// until the wait Redis gave is over on the cache's clock (Config.Now, here
// one the test moves), less the 0.1 % clock margin; then Redis decides.
func TestDenialCacheShared(t *testing.T) {
	srv := redistest.Start(t)
	cache := sredis.NewDenialCache()
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	edit := func(c *sredis.Config) { c.Denials, c.Now = cache, clock }
	op := limiter.Op{Client: "user:shared", Rule: "r", Params: paramsOf(algorithm.FixedWindow, 1, conformance.Hour), Cost: 1}

	first := openStore(t, edit, srv.Addr())
	take(t, first, op)
	res, info := take(t, first, op)
	if res[0].Allowed || info.Origin != limiter.OriginStore || res[0].RetryAfter <= 0 {
		t.Fatalf("second call = %+v from %v, want denied by Redis with a wait", res[0], info.Origin)
	}
	wait := time.Duration(res[0].RetryAfter) * time.Microsecond
	first.Close()
	do(t, srv, "flushall") // Redis forgets the bucket

	second := openStore(t, edit, srv.Addr())
	sha0, eval0 := scriptCalls(t, srv)
	now.Add(int64(wait - wait/1000 - time.Millisecond))
	if res, info := take(t, second, op); res[0].Allowed || info.Origin != limiter.OriginLocalDenialCache {
		t.Fatalf("new store, just before the wait is over = %+v from %v, want denied by the shared cache", res[0], info.Origin)
	}
	if sha, eval := scriptCalls(t, srv); sha != sha0 || eval != eval0 {
		t.Fatalf("the shared cache's denial ran %d scripts, want none", sha-sha0+eval-eval0)
	}
	now.Add(int64(wait/1000 + 2*time.Millisecond))
	if res, info := take(t, second, op); !res[0].Allowed || info.Origin != limiter.OriginStore {
		t.Fatalf("new store, the wait over = %+v from %v, want allowed by Redis (which lost the bucket)", res[0], info.Origin)
	}
}

// TestDenialCacheFullShard: a new denial on a shard of the cache that is
// full of live entries looks at a sample of them for expired ones, under
// the shard's lock, not at all 16,384.
func TestDenialCacheFullShard(t *testing.T) {
	c := sredis.NewDenialCache()
	p := paramsOf(algorithm.TokenBucket, 5, conformance.Minute)
	denied := []algorithm.Result{{Reason: algorithm.ReasonLimited, RetryAfter: 60 * conformance.Second, ResetAfter: 60 * conformance.Second}}
	sent := time.Now()
	target := sredis.DenialShard(c, "user:0", "r")
	filled := 0
	for i := 0; filled < sredis.DenialsPerShard+1; i++ {
		client := "user:" + strconv.Itoa(i)
		if sredis.DenialShard(c, client, "r") != target {
			continue
		}
		sredis.Remember(c, []limiter.Op{{Client: client, Rule: "r", Params: p, Cost: 1}}, denied, sent, 0)
		filled++
	}
	if got := sredis.DenialSwept(c); got == 0 || got > 64 {
		t.Errorf("one denial on a full shard looked at %d entries, want a sample (1 to 64)", got)
	}
}

// TestDenialCacheNeverHoldsACharge: a charge (algorithm.Params.Charge)
// is taken even where its bucket denies, so it always reaches Redis, never
// the local denial cache: each charge adds to the debt. And a charge among
// the ops of a call is taken whatever another op of the call says.
func TestDenialCacheNeverHoldsACharge(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, nil, srv.Addr())
	charge := limiter.Op{Client: "user:ai", Rule: "r", Params: paramsOf(algorithm.TokenBucket, 2, conformance.Minute), Cost: 3}
	charge.Params.Charge = true
	var last int64
	for i := range 4 {
		// 3 tokens of 30 s each time: the debt grows by 90 s.
		res, info := take(t, s, charge)
		if res[0].Allowed || info.Origin != limiter.OriginStore || res[0].ResetAfter < last+90*conformance.Second-conformance.Second {
			t.Fatalf("charge %d = %+v from %v, want denied by the store, reset after ≥ %d µs", i+1, res[0], info.Origin, last+89*conformance.Second)
		}
		last = res[0].ResetAfter
	}
	// With a request op that denies: the charge op is taken all the same.
	other := limiter.Op{Client: "user:ai", Rule: "one", Params: paramsOf(algorithm.FixedWindow, 1, conformance.Day), Cost: 2}
	fresh := charge
	fresh.Rule = "fresh"
	fresh.Params = paramsOf(algorithm.FixedWindow, 2, conformance.Day)
	fresh.Params.Charge = true
	fresh.Cost = 1 // it fits: a request op in its place would be vetoed
	if res, _ := take(t, s, other, fresh); res[0].Allowed {
		t.Fatalf("a cost of 2 on a limit of 1 = %+v, want denied", res[0])
	}
	peek := fresh
	peek.Cost = 0
	if res, _ := take(t, s, peek); !res[0].Allowed || res[0].Remaining != 1 {
		t.Fatalf("check after a charge of 1 on a limit of 2 = %+v, want 1 remaining: the charge was taken", res[0])
	}
	other.Cost = 1
	if res, _ := take(t, s, other); !res[0].Allowed {
		t.Fatalf("the denied request op took something: %+v", res[0])
	}
}
