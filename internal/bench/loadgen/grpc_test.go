package loadgen

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/rlstest"
	"github.com/sluicehq/sluice/rules"
)

func TestRLSLoad(t *testing.T) {
	load, err := NewRLSLoad(258, "ip", "edge", "POST /login")
	if err != nil {
		t.Fatal(err)
	}
	got := load.Request(257)
	d := got.Descriptors[0]
	if got.Domain != "edge" || len(got.Descriptors) != 1 || len(d.Entries) != 3 ||
		d.Entries[0].Key != "remote_address" || d.Entries[0].Value != "10.0.1.1" ||
		d.Entries[1].Key != "method" || d.Entries[1].Value != "POST" || d.Entries[2].Key != "path" || d.Entries[2].Value != "/login" {
		t.Errorf("request 257 = %v, want domain edge, remote_address 10.0.1.1, POST /login", got)
	}
	load, _ = NewRLSLoad(2, "user", "d", "GET /x")
	if e := load.Request(1).Descriptors[0].Entries[0]; e.Key != "user" || e.Value != "u1" {
		t.Errorf("user request 1 = %v, want user u1", load.Request(1))
	}
	for _, bad := range []struct {
		n                      int
		mode, domain, endpoint string
	}{{0, "user", "d", "GET /x"}, {1, "email", "d", "GET /x"}, {1, "user", "", "GET /x"}, {1, "user", "d", "GET"}} {
		if _, err := NewRLSLoad(bad.n, bad.mode, bad.domain, bad.endpoint); err == nil {
			t.Errorf("NewRLSLoad(%v) = nil error, want one", bad)
		}
	}
}

// TestGRPCCheck drives a real RLS server (embedded store, 5 calls an hour
// per user) over loopback with each client: the counts are exact.
func TestGRPCCheck(t *testing.T) {
	for _, client := range []GRPCClient{LeanClient, GoClient} {
		t.Run(string(client), func(t *testing.T) { testGRPCCheck(t, client) })
	}
	load, _ := NewRLSLoad(10, "user", "d", "GET /api/orders")
	if _, err := NewGRPCCheck("127.0.0.1:1", 1, time.Second, load, Auth{}, "grpc"); err == nil {
		t.Errorf(`NewGRPCCheck(client "grpc") = nil error, want one`)
	}
}

func testGRPCCheck(t *testing.T, client GRPCClient) {
	five := &rules.Set{Rules: []rules.Rule{{ID: "five", By: rules.ByUser, Limit: 5, Window: rules.Duration(time.Hour)}}}
	addr := rlstest.Serve(t, five, nil)

	load, _ := NewRLSLoad(10, "user", "d", "GET /api/orders")
	c, err := NewGRPCCheck("grpc://"+addr, 2, 5*time.Second, load, Auth{}, client)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Conns() != 2 || c.Target() != addr {
		t.Errorf("Conns, Target = %d, %q, want 2, %q", c.Conns(), c.Target(), addr)
	}
	res, err := Run(context.Background(), Config{Concurrency: 4, Duration: time.Minute, Requests: 200, NewCall: c.NewCall})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 200 || res.Errors != 0 || res.Allowed != 50 || res.Denied != 150 {
		t.Errorf("Run = %d calls, %d errors, %d allowed, %d denied; want 200, 0, 50, 150 (first error %v)",
			res.Requests, res.Errors, res.Allowed, res.Denied, res.FirstErr)
	}

	// A malformed request is an error of the call.
	bad := &RLSLoad{Domain: "", Key: "user", Values: []string{"u"}, Method: "GET", Path: "/"}
	c2, _ := NewGRPCCheck(addr, 1, 5*time.Second, bad, Auth{}, client)
	defer c2.Close()
	if _, err := c2.NewCall(0)(context.Background()); err == nil || !strings.Contains(err.Error(), "InvalidArgument") {
		t.Errorf("call without a domain = %v, want InvalidArgument", err)
	}
	for _, target := range []string{"http://127.0.0.1:8081", "127.0.0.1", "grpc://127.0.0.1:8081/x"} {
		if _, err := NewGRPCCheck(target, 1, time.Second, load, Auth{}, client); err == nil {
			t.Errorf("NewGRPCCheck(%q) = nil error, want one", target)
		}
	}
}
