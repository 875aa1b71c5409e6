package rls_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/rls"
	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/memory"
)

// benchServer is an RLS server over the embedded store with one
// 100-per-second rule by user and a 100,000-user keyspace of requests.
func benchServer(b *testing.B) (*rls.Server, []*rlsv3.RateLimitRequest) {
	m := metrics.New()
	srv := rls.New(m.Store("memory", limitertest.Store(b, memory.DefaultConfig())), rls.Config{Metrics: m, QuotaHeaders: true})
	ix := limitertest.Compile(b, &rules.Set{Rules: []rules.Rule{
		{ID: "per-user", Limit: 100, Window: rules.Duration(time.Second), By: rules.ByUser},
	}})
	srv.SetRules(ix)
	m.SetRules(ix)
	reqs := make([]*rlsv3.RateLimitRequest, 100_000)
	for i := range reqs {
		reqs[i] = request("bench", desc("user", "u"+strconv.Itoa(i), "method", "GET", "path", "/api/orders"))
	}
	return srv, reqs
}

// handlerCalls gives each goroutine of benchRequests srv's handler to call
// directly, without gRPC.
func handlerCalls(srv *rls.Server) func() func(context.Context, *rlsv3.RateLimitRequest) error {
	return func() func(context.Context, *rlsv3.RateLimitRequest) error {
		return func(ctx context.Context, req *rlsv3.RateLimitRequest) error {
			_, err := srv.ShouldRateLimit(ctx, req)
			return err
		}
	}
}

// BenchmarkShouldRateLimit calls the handler directly: the decision and
// the answer, without gRPC.
func BenchmarkShouldRateLimit(b *testing.B) {
	srv, reqs := benchServer(b)
	took := benchRequests(b, reqs, handlerCalls(srv))
	b.ReportMetric(float64(b.N)/took.Seconds(), "decisions/s")
}

// BenchmarkShouldRateLimitGRPC calls over gRPC on loopback from 64
// concurrent callers on 4 connections, client and server in one process.
func BenchmarkShouldRateLimitGRPC(b *testing.B) {
	srv, reqs := benchServer(b)
	addr := serveGRPC(b, srv)
	const conns = 4
	clients := make([]rlsv3.RateLimitServiceClient, conns)
	for i := range clients {
		clients[i] = rlsv3.NewRateLimitServiceClient(dial(b, addr))
	}
	var worker atomic.Int64
	b.SetParallelism(32) // 64 callers on 2 cores
	took := benchRequests(b, reqs, func() func(context.Context, *rlsv3.RateLimitRequest) error {
		c := clients[worker.Add(1)%conns]
		return func(ctx context.Context, req *rlsv3.RateLimitRequest) error {
			_, err := c.ShouldRateLimit(ctx, req)
			return err
		}
	})
	b.ReportMetric(float64(b.N)/took.Seconds(), "decisions/s")
}

// BenchmarkShouldRateLimitEach is a request of three descriptors that
// disagree (three users), each decided as its own check and all taken in
// one store operation.
func BenchmarkShouldRateLimitEach(b *testing.B) {
	srv, _ := benchServer(b)
	reqs := make([]*rlsv3.RateLimitRequest, 10_000)
	for i := range reqs {
		reqs[i] = request("bench",
			desc("user", "u"+strconv.Itoa(3*i), "method", "GET", "path", "/api/orders"),
			desc("user", "u"+strconv.Itoa(3*i+1), "method", "GET", "path", "/api/orders"),
			desc("user", "u"+strconv.Itoa(3*i+2), "method", "GET", "path", "/api/orders"))
	}
	benchRequests(b, reqs, handlerCalls(srv))
}
