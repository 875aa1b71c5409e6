package memory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/testkit/conformance"
	"github.com/sluicehq/sluice/limiter"
)

// BenchmarkTake decides one op on an existing bucket per call, the clock
// stepping 1µs per call. The params keep every algorithm mostly allowing:
// a million calls a second, except the sliding log, which holds 100
// entries and drops one per call.
func BenchmarkTake(b *testing.B) {
	bench := []algorithm.Params{
		{Kind: algorithm.TokenBucket, Limit: 1_000_000, Window: conformance.Second},
		{Kind: algorithm.LeakyBucket, Limit: 1_000_000, Window: conformance.Second},
		{Kind: algorithm.FixedWindow, Limit: 1_000_000, Window: conformance.Second},
		{Kind: algorithm.SlidingWindow, Limit: 1_000_000, Window: conformance.Second},
		{Kind: algorithm.SlidingLog, Limit: 100, Window: 100},
	}
	for _, p := range bench {
		b.Run(p.Kind.String(), func(b *testing.B) {
			now := conformance.Base
			s, err := New(Config{Clock: func() int64 { now++; return now }, SweepInterval: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ops := []limiter.Op{{Client: "user:u0001234567", Rule: "per-user", Params: p, Cost: 1}}
			res := make([]algorithm.Result, 1)
			ctx := context.Background()
			if _, err := s.Take(ctx, ops, res); err != nil {
				b.Fatal(err)
			}
			allowed := 0
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				s.Take(ctx, ops, res)
				if res[0].Allowed {
					allowed++
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
			b.ReportMetric(float64(allowed)/float64(b.N), "allowed/op")
		})
	}
}

// BenchmarkTakeParallel decides calls on random clients of a 100k keyspace
// (all buckets existing) from GOMAXPROCS goroutines on the default store
// with its real clock and sweeper; ops=3 checks three rules per call.
func BenchmarkTakeParallel(b *testing.B) {
	const keyspace = 100_000
	clients := make([]string, keyspace)
	for i := range clients {
		clients[i] = fmt.Sprintf("user:u%010d", i)
	}
	p := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 1000, Window: conformance.Minute}
	for _, nops := range []int{1, 3} {
		b.Run("ops="+strconv.Itoa(nops), func(b *testing.B) {
			s, err := New(DefaultConfig())
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			rules := []string{"per-user", "per-user-burst", "per-user-daily"}
			res := make([]algorithm.Result, nops)
			ops := make([]limiter.Op, nops)
			for _, c := range clients {
				for j := range ops {
					ops[j] = limiter.Op{Client: c, Rule: rules[j], Params: p, Cost: 1}
				}
				if _, err := s.Take(ctx, ops, res); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
				ops := make([]limiter.Op, nops)
				res := make([]algorithm.Result, nops)
				for j := range ops {
					ops[j] = limiter.Op{Rule: rules[j], Params: p, Cost: 1}
				}
				for pb.Next() {
					c := clients[rng.IntN(keyspace)]
					for j := range ops {
						ops[j].Client = c
					}
					if _, err := s.Take(ctx, ops, res); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

// BenchmarkMemory inserts N token-bucket buckets (client ids like
// "user:u0001234567", one rule "per-user") and reports the Go heap they
// take: bytes/bucket and heap-MB, measured as HeapAlloc after runtime.GC
// less HeapAlloc before, and sweep-µs/shard, the time a Sweep that drops
// nothing holds each shard's lock (the worst case). The 10M size runs only with SLUICE_BENCH_10M=1
// (about 1 GB of heap and tens of seconds); use -benchtime=1x.
func BenchmarkMemory(b *testing.B) {
	for _, n := range []int{1_000_000, 10_000_000} {
		b.Run(fmt.Sprintf("buckets=%dM", n/1_000_000), func(b *testing.B) {
			if n > 1_000_000 && os.Getenv("SLUICE_BENCH_10M") == "" {
				b.Skip("set SLUICE_BENCH_10M=1 to run")
			}
			var perBucket, heap, sweep float64
			for range b.N {
				perBucket, heap, sweep = measureHeap(b, n)
			}
			b.ReportMetric(perBucket, "bytes/bucket")
			b.ReportMetric(sweep, "sweep-µs/shard")
			b.ReportMetric(heap/(1<<20), "heap-MB")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/insert")
		})
	}
}

// measureHeap returns the heap n new buckets take, per bucket and in all,
// and the time a sweep spends on each shard.
func measureHeap(b *testing.B, n int) (perBucket, total, sweepPerShard float64) {
	b.StopTimer()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.StartTimer()

	now := conformance.Base
	// A ceiling well above n: this measures buckets, not evictions.
	s, err := New(Config{Clock: func() int64 { return now }, SweepInterval: -1, MaxBuckets: 2 * n})
	if err != nil {
		b.Fatal(err)
	}
	p := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 100, Window: conformance.Minute}
	buf := []byte("user:u0000000000")
	ops := []limiter.Op{{Rule: "per-user", Params: p, Cost: 1}}
	res := make([]algorithm.Result, 1)
	ctx := context.Background()
	for i := range n {
		// The id is built in place in buf: the store must copy it.
		v := i
		for j := len(buf) - 1; j >= len("user:u"); j-- {
			buf[j] = byte('0' + v%10)
			v /= 10
		}
		ops[0].Client = unsafe.String(&buf[0], len(buf))
		if _, err := s.Take(ctx, ops, res); err != nil {
			b.Fatal(err)
		}
	}

	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	if got := s.Len(); got != n {
		b.Fatalf("Len = %d, want %d", got, n)
	}
	start := time.Now()
	if got := s.Sweep(now); got != 0 {
		b.Fatalf("Sweep dropped %d, want 0", got)
	}
	sweepPerShard = float64(time.Since(start).Microseconds()) / float64(len(s.shards))
	b.StartTimer()
	total = float64(after.HeapAlloc) - float64(before.HeapAlloc)
	return total / float64(n), total, sweepPerShard
}

// BenchmarkTakeAtCeiling decides calls of new clients on a default store
// held at its ceiling (100k buckets here) by buckets with state, none of
// which may be dropped: every call looks for a full bucket and is decided
// on its rule's overflow bucket, the cost of the ceiling under a flood of
// distinct clients.
func BenchmarkTakeAtCeiling(b *testing.B) {
	const max = 100_000
	clients := make([]string, 4*max) // the first two ceilings' worth fill the store
	for i := range clients {
		clients[i] = fmt.Sprintf("ip:2001:db8:%x::/64", i)
	}
	now := conformance.Base
	s, err := New(Config{Clock: func() int64 { now++; return now }, SweepInterval: -1, MaxBuckets: max})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	p := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 100, Window: conformance.Minute}
	ops := []limiter.Op{{Rule: "per-ip", Params: p, Cost: 1}}
	res := make([]algorithm.Result, 1)
	ctx := context.Background()
	for _, c := range clients[:2*max] {
		ops[0].Client = c
		s.Take(ctx, ops, res)
	}
	ev, ov := s.Evictions(), s.Overflows()
	i := 2 * max
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		ops[0].Client = clients[i%len(clients)]
		i++
		if _, err := s.Take(ctx, ops, res); err != nil {
			b.Fatalf("Take = %v", err)
		}
	}
	b.StopTimer()
	if s.Len() > max {
		b.Fatalf("Len = %d, want ≤ %d", s.Len(), max)
	}
	b.ReportMetric(float64(s.Evictions()-ev)/float64(b.N), "evictions/op")
	b.ReportMetric(float64(s.Overflows()-ov)/float64(b.N), "overflows/op")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}
