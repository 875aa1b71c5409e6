package cli

import (
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/rls"
	"github.com/sluicehq/sluice/internal/testkit/rlstest"
	"github.com/sluicehq/sluice/rules"
)

// TestBenchGRPC runs `sluice bench --grpc` against a real RLS server with a
// rule that admits 5 calls an hour per user: 10 users × 5, less the one
// call bench makes before it starts, are allowed.
func TestBenchGRPC(t *testing.T) {
	five := &rules.Set{Rules: []rules.Rule{{ID: "five", By: rules.ByUser, Limit: 5, Window: rules.Duration(time.Hour)}}}
	addr := rlstest.Serve(t, five, rls.ServerOptions())

	code, out, errOut := sluice(t, "", "bench", "--grpc", "--target", addr, "--requests", "1000", "--duration", "1m",
		"--clients", "10", "--concurrency", "4", "--grpc-conns", "2", "--json")
	if code != 0 {
		t.Fatalf("bench --grpc: exit %d: %s", code, errOut)
	}
	var rep map[string]any
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("bench --grpc --json printed %q: %v", out, err)
	}
	for k, want := range map[string]float64{"requests": 1000, "allowed": 49, "denied": 951, "errors": 0, "concurrency": 4} {
		if got := rep[k]; got != want {
			t.Errorf("%s = %v, want %v", k, got, want)
		}
	}
	if rep["target"] != addr {
		t.Errorf("target = %v, want %s", rep["target"], addr)
	}

	// grpc-go, on other users of the same server.
	code, out, errOut = sluice(t, "", "bench", "--grpc", "--grpc-client", "grpc-go", "--target", addr, "--requests", "100", "--duration", "1m",
		"--clients", "10", "--concurrency", "4", "--grpc-conns", "2", "--domain", "other", "--endpoint", "GET /y", "--json")
	rep = nil
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil {
		t.Fatalf("bench --grpc --grpc-client grpc-go: exit %d: %s%s", code, out, errOut)
	}
	for k, want := range map[string]float64{"requests": 100, "errors": 0} {
		if got := rep[k]; got != want {
			t.Errorf("grpc-go: %s = %v, want %v", k, got, want)
		}
	}

	code, out, errOut = sluice(t, "", "bench", "--grpc", "--target", addr, "--requests", "10", "--clients", "10", "--concurrency", "2", "--domain", "edge")
	if code != 0 || !strings.Contains(out, "ShouldRateLimit "+addr+" (domain edge): 2 callers on 2 connections") ||
		!strings.Contains(out, "decisions   10 in") {
		t.Errorf("bench --grpc text: exit %d:\n%s%s", code, out, errOut)
	}

	code, out, errOut = sluice(t, "", "bench", "--grpc", "--grpc-health", "--target", addr, "--requests", "20", "--concurrency", "2", "--json")
	rep = nil
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep["requests"] != 20.0 || rep["allowed"] != 20.0 || rep["errors"] != 0.0 {
		t.Errorf("bench --grpc --grpc-health: exit %d: %s%s; want 20 calls, all SERVING", code, out, errOut)
	}
	if code, _, errOut := sluice(t, "", "bench", "--grpc-health", "--requests", "1"); code != 1 || !strings.Contains(errOut, "--grpc-health needs --grpc") {
		t.Errorf("bench --grpc-health without --grpc: exit %d, stderr %q", code, errOut)
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--grpc-conns", "0"}, "--grpc-conns must be 1 to 1000"},
		{[]string{"--target", "http://127.0.0.1:1"}, "target must be host:port"},
		{[]string{"--domain", ""}, "domain must not be empty"},
		{[]string{"--grpc-client", "grpc"}, "--grpc-client must be lean or grpc-go"},
		{[]string{"--target", s0()}, "does not answer ShouldRateLimit"},
	} {
		code, _, errOut := sluice(t, "", append([]string{"bench", "--grpc", "--duration", "1m", "--timeout", "2s"}, tt.args...)...)
		if code != 1 || !strings.Contains(errOut, tt.want) {
			t.Errorf("bench --grpc %v: exit %d, stderr %q; want 1 and %q", tt.args, code, errOut, tt.want)
		}
	}
}

// s0 returns an address nothing listens on.
func s0() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "127.0.0.1:1"
	}
	defer l.Close()
	return l.Addr().String()
}
