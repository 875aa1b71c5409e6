package console_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/console"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/memory"
)

// BenchmarkEngine is the check API as sluice serve runs it — metrics,
// the embedded store — with the console's summaries on (the denial hook
// feeding the heavy hitters, the sampler reading the metrics every second)
// or off: SLUICE_BENCH_SUMMARIES=off. The mix is the summaries' worst
// case: 1024 callers on a rule of 10 a day, each past its limit before
// the timer starts, so every call is denied and reaches the summary, and
// the callers churn through its counters; SLUICE_BENCH_MIX=allowed
// makes every call pass (the usual case). SLUICE_BENCH_SAMPLER=off leaves
// the sampler out (its cost is per second: BenchmarkSample). Compare the
// two side by side, in instructions (docs/console.md, "Cost"):
//
//	go test -c -o console.test ./internal/console
//	for s in off on; do for n in 10000 30000; do
//	  env SLUICE_BENCH_SUMMARIES=$s SLUICE_BENCH_SAMPLER=off GOMAXPROCS=1 GOGC=off GODEBUG=asyncpreemptoff=1,memprofilerate=0 \
//	    valgrind --tool=callgrind ./console.test -test.run='^$' -test.bench='^BenchmarkEngine$' -test.benchtime=${n}x -test.cpu=1
//	done; done
//
// or in CPU time:
//
//	go test -c -o console.test ./internal/console
//	farm-bench -n 7 --vs 'env SLUICE_BENCH_SUMMARIES=off ./console.test -test.run=^$ -test.bench=Engine -test.benchtime=400000x' \
//	    -- env SLUICE_BENCH_SUMMARIES=on ./console.test -test.run=^$ -test.bench=Engine -test.benchtime=400000x
func BenchmarkEngine(b *testing.B) {
	on := os.Getenv("SLUICE_BENCH_SUMMARIES") != "off"
	m := metrics.New()
	st := limitertest.Store(b, memory.Config{Shards: 16, SweepInterval: -1})
	lim := limiter.New(m.Instrument(st), limiter.Config{})
	limit := int64(10)
	if os.Getenv("SLUICE_BENCH_MIX") == "allowed" {
		limit = 1_000_000_000 // every call allowed: the usual case
	}
	// A day's window: a run under callgrind, which takes minutes, sees no
	// bucket refill, so the mix is the same in every run.
	ix := limitertest.Compile(b, &rules.Set{Rules: []rules.Rule{{ID: "per-user", Limit: limit, Window: rules.Duration(24 * time.Hour)}}})
	lim.SetRules(ix)
	m.SetRules(ix)
	cfg := server.Config{OnDecision: m.Decision}
	if on {
		h := console.NewHitters(0, nil)
		cfg.OnDenied = console.NewFeed(h, limiter.Config{}).Denied
		if os.Getenv("SLUICE_BENCH_SAMPLER") != "off" {
			s := console.NewSampler(m.ConsoleGatherer())
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go s.Run(ctx, time.Second)
		}
	}
	srv := server.New(lim, cfg)
	bodies := make([][]byte, 1024)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, `{"user":"user-%d","endpoint":"GET /api/orders"}`, i)
	}
	if limit < 1_000_000_000 {
		// Every caller past its limit, and the summary past its first
		// denials (counted one by one): what is measured is the
		// steady state of a flood, every call denied.
		for range limit + 3 {
			for _, body := range bodies {
				w := httptest.NewRecorder()
				srv.ServeHTTP(w, httptest.NewRequest("POST", "/ratelimit/check", bytes.NewReader(body)))
			}
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		r := httptest.NewRequest("POST", "/ratelimit/check", nil)
		rd := bytes.NewReader(nil)
		i := 0
		for pb.Next() {
			body := bodies[i%len(bodies)]
			rd.Reset(body)
			r.Body = io.NopCloser(rd)
			r.ContentLength = int64(len(body))
			w := httptest.NewRecorder()
			srv.ServeHTTP(w, r)
			i++
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// BenchmarkSample is one reading of the metrics by the Sampler, which it
// takes once a second: its cost is per second, not per decision.
func BenchmarkSample(b *testing.B) {
	m := metrics.New()
	st := limitertest.Store(b, memory.Config{Shards: 16, SweepInterval: -1})
	lim := limiter.New(m.Instrument(st), limiter.Config{})
	ix := limitertest.Compile(b, &rules.Set{Rules: []rules.Rule{{ID: "per-user", Limit: 10, Window: rules.Duration(time.Minute)}}})
	lim.SetRules(ix)
	m.SetRules(ix)
	for i := range 100 {
		d, err := lim.Check(context.Background(), &limiter.Request{User: fmt.Sprint("u", i%20)})
		if err != nil {
			b.Fatal(err)
		}
		m.Decision(&d)
	}
	s := console.NewSampler(m.ConsoleGatherer())
	b.ReportAllocs()
	for b.Loop() {
		s.Sample()
	}
}
