package listen_test

import (
	"context"
	"crypto/tls"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/sluicehq/sluice/internal/listen"
	"github.com/sluicehq/sluice/internal/rls"
	"github.com/sluicehq/sluice/internal/testkit/listentest"
	"github.com/sluicehq/sluice/internal/testkit/rlstest"
	"github.com/sluicehq/sluice/rules"
)

// deadlines is a gRPC service with one method, /test.Deadlines/Get, that
// records the deadline its call runs under.
type deadlines struct {
	mu  sync.Mutex
	got []time.Duration // time left at the handler; -1: none
}

func (d *deadlines) register(g *grpc.Server) {
	g.RegisterService(&grpc.ServiceDesc{
		ServiceName: "test.Deadlines",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Get", Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			if err := dec(&emptypb.Empty{}); err != nil {
				return nil, err
			}
			left := time.Duration(-1)
			if dl, ok := ctx.Deadline(); ok {
				left = time.Until(dl)
			}
			d.mu.Lock()
			d.got = append(d.got, left)
			d.mu.Unlock()
			return &emptypb.Empty{}, nil
		}}},
	}, d)
}

func (d *deadlines) last() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.got[len(d.got)-1]
}

// grpcServer serves the Envoy API (one rule: 1000 a minute per user), the
// health service and deadlines with GRPCOptions(l, tok, tl) on loopback.
func grpcServer(t *testing.T, l listen.Limits, tok listen.Tokens, tl *listen.TLS) (string, *deadlines) {
	t.Helper()
	d := &deadlines{}
	addr := rlstest.Serve(t, &rules.Set{Rules: []rules.Rule{{ID: "per-user", By: rules.ByUser, Limit: 1000, Window: rules.Duration(time.Minute)}}},
		append(rls.ServerOptions(), listen.GRPCOptions(l, tok, tl)...), d.register)
	return addr, d
}

func dial(t *testing.T, addr string, cfg *tls.Config) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

var aliceCall = &rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: []*ratelimitv3.RateLimitDescriptor{
	{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}}},
}}

// TestGRPCTokenAndTLS: over TLS with a client CA, the Envoy API refuses a
// call without the token (Unauthenticated) and decides one with it; the
// health service answers without a token; a client without a certificate
// gets no answer at all.
func TestGRPCTokenAndTLS(t *testing.T) {
	ca, clients := listentest.NewCA(t, "server CA"), listentest.NewCA(t, "client CA")
	tl, _ := mutualTLS(t, ca, clients, "h2")
	tok, err := listen.ParseTokens("--data-token", "old,new")
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := grpcServer(t, listen.Limits{}, tok, tl)
	envoy := clients.Client(t, "envoy").TLS(t)
	cc := dial(t, addr, &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{envoy}})
	c := rlsv3.NewRateLimitServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	for _, auth := range []string{"", "Bearer wrong", "old"} {
		cctx := ctx
		if auth != "" {
			cctx = metadata.AppendToOutgoingContext(ctx, "authorization", auth)
		}
		_, err := c.ShouldRateLimit(cctx, aliceCall)
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("ShouldRateLimit with authorization %q = %v, want Unauthenticated", auth, err)
		}
	}
	for _, auth := range []string{"Bearer old", "Bearer new"} {
		resp, err := c.ShouldRateLimit(metadata.AppendToOutgoingContext(ctx, "authorization", auth), aliceCall)
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 1000 {
			t.Errorf("ShouldRateLimit with %q = %v, %v; want OK under the 1000/min rule", auth, resp, err)
		}
	}
	h, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: rls.ServiceName})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health Check without a token = %v, %v; want SERVING", h, err)
	}

	stranger := dial(t, addr, &tls.Config{RootCAs: ca.Pool()})
	if _, err := healthpb.NewHealthClient(stranger).Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("health Check from a client without a certificate = %v, want Unavailable (no connection)", err)
	}
}

// TestGRPCLimits: a call without a deadline gets BodyTimeout, one with an
// earlier deadline keeps it; connections that never finish their setup
// are closed after ReadHeaderTimeout.
func TestGRPCLimits(t *testing.T) {
	l := listen.Limits{ReadHeaderTimeout: 500 * time.Millisecond, BodyTimeout: 3 * time.Second}
	addr, d := grpcServer(t, l, listen.Tokens{}, nil)
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if err := cc.Invoke(context.Background(), "/test.Deadlines/Get", &emptypb.Empty{}, &emptypb.Empty{}); err != nil {
		t.Fatal(err)
	}
	if left := d.last(); left <= 0 || left > l.BodyTimeout {
		t.Errorf("a call without a deadline ran with %s left, want at most the %s BodyTimeout", left, l.BodyTimeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := cc.Invoke(ctx, "/test.Deadlines/Get", &emptypb.Empty{}, &emptypb.Empty{}); err != nil {
		t.Fatal(err)
	}
	if left := d.last(); left <= 0 || left > time.Second {
		t.Errorf("a call with a 1 s deadline ran with %s left, want its own deadline", left)
	}

	// 200 connections that send half the HTTP/2 preface and stop.
	const n = 200
	start := time.Now()
	conns := make([]<-chan listentest.Trickled, n)
	for i := range conns {
		conns[i] = listentest.Trickle(t, addr, "PRI * HTTP/2.0\r\n", 0, 0, 20*time.Second)
	}
	open := 0
	for _, c := range conns {
		if (<-c).Open {
			open++
		}
	}
	if open > 0 {
		t.Errorf("%d of %d connections that never finished their setup were still open after 20 s; want them closed after %s", open, n, l.ReadHeaderTimeout)
	}
	t.Logf("%d stalled connections closed in %s", n, time.Since(start).Round(time.Millisecond))
}
