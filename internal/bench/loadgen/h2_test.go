package loadgen

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/testkit/listentest"
	"github.com/sluicehq/sluice/internal/testkit/rlstest"
	"github.com/sluicehq/sluice/rules"
)

// perHour is a rule of n calls an hour per user.
func perHour(n int64) *rules.Set {
	return &rules.Set{Rules: []rules.Rule{{ID: "n", By: rules.ByUser, Limit: n, Window: rules.Duration(time.Hour)}}}
}

// TestAppendRequest: the lean client's request is the proto encoding of
// Request, behind gRPC's length prefix.
func TestAppendRequest(t *testing.T) {
	for _, l := range []*RLSLoad{
		mustLoad(t, 300, "ip", "edge", "POST /login"),
		mustLoad(t, 2, "user", "sluice", "GET /api/orders"),
		{Domain: "", Key: "user", Values: []string{strings.Repeat("x", 300)}, Method: "GET", Path: "/"},
	} {
		for i := range l.Values {
			want, err := proto.Marshal(l.Request(i))
			if err != nil {
				t.Fatal(err)
			}
			got := l.AppendRequest([]byte("junk"), i)
			if string(got[:4]) != "junk" || got[4] != 0 || int(got[5])<<24|int(got[6])<<16|int(got[7])<<8|int(got[8]) != len(want) || string(got[9:]) != string(want) {
				t.Fatalf("AppendRequest(%q, %d) = %x, want junk, prefix, %x", l.Domain, i, got, want)
			}
		}
	}
}

func mustLoad(t *testing.T, n int, mode, domain, endpoint string) *RLSLoad {
	t.Helper()
	l, err := NewRLSLoad(n, mode, domain, endpoint)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// leanCheck returns a lean GRPCCheck of load against addr, closed at the
// end of the test.
func leanCheck(t *testing.T, addr string, conns int, timeout time.Duration, load *RLSLoad) *GRPCCheck {
	t.Helper()
	c, err := NewGRPCCheck(addr, conns, timeout, load, Auth{}, LeanClient)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestLeanOverLimit: one user with 3 calls an hour is allowed 3 times,
// then answered OVER_LIMIT, on one connection and over many.
func TestLeanOverLimit(t *testing.T) {
	addr := rlstest.Serve(t, perHour(3), nil)
	c := leanCheck(t, addr, 1, 5*time.Second, mustLoad(t, 1, "user", "d", "GET /x"))
	call := c.NewCall(0)
	for i, want := range []bool{true, true, true, false, false} {
		if allowed, err := call(context.Background()); allowed != want || err != nil {
			t.Errorf("call %d = %v, %v; want %v, nil", i, allowed, err, want)
		}
	}
}

// TestLeanFlowControl makes calls that use up the HTTP/2 windows many times
// over, in both directions, against a server with the smallest windows
// gRPC allows (64 KB, no window growth): requests of 100 KB, larger than a
// stream's window, wait for the server's WINDOW_UPDATEs, and the client's
// own 64 KB receive window must be given back for thousands of replies.
func TestLeanFlowControl(t *testing.T) {
	addr := rlstest.Serve(t, perHour(1_000_000), []grpc.ServerOption{
		grpc.InitialWindowSize(65535), grpc.InitialConnWindowSize(65535)})

	t.Run("small replies", func(t *testing.T) {
		c := leanCheck(t, addr, 1, 5*time.Second, mustLoad(t, 100, "user", "d", "GET /x"))
		c.lean[0].recvWindow = 65535
		// The request cap ends the run; Duration only bounds it. 20 s was
		// too short for 5,000 calls with -race on a loaded 2-core machine.
		res, err := Run(context.Background(), Config{Concurrency: 8, Duration: 3 * time.Minute, Requests: 5000, NewCall: c.NewCall})
		if err != nil {
			t.Fatal(err)
		}
		if res.Requests != 5000 || res.Allowed != 5000 {
			t.Errorf("Run = %d calls, %d allowed, %d errors (first %v); want 5000 allowed", res.Requests, res.Allowed, res.Errors, res.FirstErr)
		}
	})
	t.Run("large requests", func(t *testing.T) {
		load := mustLoad(t, 1, "user", "d", "GET /x")
		load.Values[0] = strings.Repeat("u", 100<<10)
		c := leanCheck(t, addr, 1, 5*time.Second, load)
		c.lean[0].recvWindow = 65535
		res, err := Run(context.Background(), Config{Concurrency: 4, Duration: time.Minute, Requests: 40, NewCall: c.NewCall})
		if err != nil {
			t.Fatal(err)
		}
		if res.Requests != 40 || res.Allowed != 40 {
			t.Errorf("Run = %d calls, %d allowed, %d errors (first %v); want 40 allowed", res.Requests, res.Allowed, res.Errors, res.FirstErr)
		}
	})
}

func isCode(err error, c codes.Code) bool {
	s, ok := status.FromError(err)
	return ok && s.Code() == c
}

// TestLeanGoAway: a server that ends every connection after 100 ms (GOAWAY,
// then close) loses no call: the client moves to a new connection.
func TestLeanGoAway(t *testing.T) {
	addr := rlstest.Serve(t, perHour(1_000_000), []grpc.ServerOption{grpc.KeepaliveParams(keepalive.ServerParameters{
		MaxConnectionAge: 100 * time.Millisecond, MaxConnectionAgeGrace: 5 * time.Second})})
	c := leanCheck(t, addr, 2, 5*time.Second, mustLoad(t, 100, "user", "d", "GET /x"))
	res, err := Run(context.Background(), Config{Concurrency: 8, Duration: 700 * time.Millisecond, NewCall: c.NewCall})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests == 0 || res.Errors != 0 {
		t.Errorf("Run = %d calls, %d errors (first %v); want some, no error", res.Requests, res.Errors, res.FirstErr)
	}
}

// TestLeanServerCloses: a call on a connection the server closes fails at
// once, and the next call dials again.
func TestLeanServerCloses(t *testing.T) {
	addr := listentest.ServeTCP(t, func(nc net.Conn) {
		// Read the preface and the first request, then hang up.
		nc.Read(make([]byte, 4096))
		nc.Close()
	})
	c := leanCheck(t, addr, 1, 5*time.Second, mustLoad(t, 1, "user", "d", "GET /x"))
	call := c.NewCall(0)
	for i := range 3 {
		start := time.Now()
		_, err := call(context.Background())
		if err == nil || !errors.Is(err, io.ErrUnexpectedEOF) && !strings.Contains(err.Error(), "connection") {
			t.Errorf("call %d on a closed connection = %v, want a connection error", i, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("call %d took %s, want it to fail at once", i, d)
		}
	}

	// A server stopped under load: calls fail, none hangs.
	addr = rlstest.Serve(t, perHour(1_000_000), nil)
	g := leanCheck(t, addr, 1, 5*time.Second, mustLoad(t, 10, "user", "d", "GET /x"))
	if _, err := g.NewCall(0)(context.Background()); err != nil {
		t.Fatal(err)
	}
	cc := g.lean[0].c
	cc.nc.Close()                             // as if the server had hung up
	_, _ = g.NewCall(0)(context.Background()) // may fail: the reader may not have seen the close yet
	if allowed, err := g.NewCall(0)(context.Background()); !allowed || err != nil {
		t.Errorf("call after the connection broke = %v, %v; want allowed on a new connection", allowed, err)
	}
	if g.lean[0].c == cc {
		t.Errorf("the broken connection is still in use")
	}
}

// TestLeanTimeout: a server that never answers makes calls fail with
// DeadlineExceeded after the timeout.
func TestLeanTimeout(t *testing.T) {
	addr := listentest.ServeTCP(t, func(nc net.Conn) {
		io.Copy(io.Discard, nc) //nolint:errcheck // until the client leaves
	})
	c := leanCheck(t, addr, 1, 100*time.Millisecond, mustLoad(t, 1, "user", "d", "GET /x"))
	call := c.NewCall(0)
	for i := range 2 {
		if _, err := call(context.Background()); !isCode(err, codes.DeadlineExceeded) {
			t.Errorf("call %d = %v, want DeadlineExceeded", i, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := call(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("call with a cancelled context = %v, want context.Canceled", err)
	}
}

// TestLeanPing: a server that pings an idle client and closes the
// connection when the ping is not answered keeps it: the client answers.
func TestLeanPing(t *testing.T) {
	addr := rlstest.Serve(t, perHour(1_000_000), []grpc.ServerOption{grpc.KeepaliveParams(keepalive.ServerParameters{
		Time: time.Second, Timeout: 200 * time.Millisecond})})
	c := leanCheck(t, addr, 1, 5*time.Second, mustLoad(t, 1, "user", "d", "GET /x"))
	call := c.NewCall(0)
	if _, err := call(context.Background()); err != nil {
		t.Fatal(err)
	}
	cc := c.lean[0].c
	time.Sleep(1500 * time.Millisecond) // the server pings after 1 s idle
	if allowed, err := call(context.Background()); !allowed || err != nil || c.lean[0].c != cc {
		t.Errorf("call after 1.5 s idle = %v, %v, same connection %v; want allowed on the same", allowed, err, c.lean[0].c == cc)
	}
}

// TestLeanHealth: the lean health check reads SERVING and NOT_SERVING.
func TestLeanHealth(t *testing.T) {
	hs := health.NewServer()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	go g.Serve(ln) //nolint:errcheck // ends with Stop
	defer g.Stop()
	addr := ln.Addr().String()
	h, err := NewGRPCHealth(addr, 1, 5*time.Second, Auth{}, LeanClient)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	call := h.NewCall(0)
	if ok, err := call(context.Background()); !ok || err != nil {
		t.Errorf("health check = %v, %v; want SERVING", ok, err)
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	if ok, err := call(context.Background()); ok || err != nil {
		t.Errorf("health check = %v, %v; want NOT_SERVING", ok, err)
	}
}

// TestClientsSendDeadline: both clients send the call's timeout, as Envoy
// does, so that the server decides under the caller's deadline and not
// under a default of its own.
func TestClientsSendDeadline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	left := make(chan time.Duration, 1)
	g := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		d, ok := ctx.Deadline()
		if !ok {
			d = time.Time{}
		}
		left <- time.Until(d)
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(g, health.NewServer())
	go g.Serve(ln) //nolint:errcheck // ends with Stop
	defer g.Stop()
	for _, client := range []GRPCClient{LeanClient, GoClient} {
		h, err := NewGRPCHealth(ln.Addr().String(), 1, 3*time.Second, Auth{}, client)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := h.NewCall(0)(context.Background()); !ok || err != nil {
			t.Errorf("%v: health check = %v, %v; want SERVING", client, ok, err)
		}
		h.Close()
		if d := <-left; d < 2*time.Second || d > 3*time.Second {
			t.Errorf("%v: the server's deadline was %v away, want about 3s", client, d)
		}
	}
}

func TestGRPCTimeout(t *testing.T) {
	for d, want := range map[time.Duration]string{
		20 * time.Millisecond: "20000u", 5 * time.Second: "5000000u", 99999999 * time.Microsecond: "99999999u",
		100 * time.Second: "100000m", 1500 * time.Nanosecond: "2u", 1000 * time.Hour: "3600000S",
	} {
		if got := grpcTimeout(d); got != want {
			t.Errorf("grpcTimeout(%v) = %q, want %q", d, got, want)
		}
	}
}
