package rls_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/rls"
)

// shouldRateLimit calls client with req and fails the test on an error or
// unless the answer has one status per descriptor.
func shouldRateLimit(t *testing.T, client rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := client.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v) = %v", req, err)
	}
	if len(resp.Statuses) != len(req.Descriptors) {
		t.Fatalf("ShouldRateLimit(%v): %d statuses, want one per descriptor (%d)", req, len(resp.Statuses), len(req.Descriptors))
	}
	return resp
}

// benchRequests decides reqs, in strides of 7919, from b's parallel
// goroutines, each through the function newCall gives it, and returns the
// time the calls took.
func benchRequests(b *testing.B, reqs []*rlsv3.RateLimitRequest, newCall func() func(context.Context, *rlsv3.RateLimitRequest) error) time.Duration {
	b.Helper()
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		call := newCall()
		ctx := context.Background()
		for pb.Next() {
			i := next.Add(7919) % int64(len(reqs))
			if err := call(ctx, reqs[i]); err != nil {
				b.Error(err)
				return
			}
		}
	})
	return time.Since(start)
}

// serveGRPC serves srv on a loopback gRPC listener until the test ends and
// returns its address.
func serveGRPC(t testing.TB, srv *rls.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(rls.ServerOptions()...)
	srv.Register(g)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	return ln.Addr().String()
}

// dial is a gRPC connection to addr, closed when the test ends.
func dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
