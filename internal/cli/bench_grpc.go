package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/sluicehq/sluice/internal/loadgen"
)

// defaultGRPCTarget is bench --grpc's --target when none is given.
const defaultGRPCTarget = "127.0.0.1:8081"

// runBenchGRPC is `sluice bench --grpc`: the load of runBench, as Envoy's
// ShouldRateLimit calls.
func runBenchGRPC(ctx context.Context, f benchFlags, mode string, stdout, stderr io.Writer) error {
	if f.health {
		return runBenchHealth(ctx, f, stdout, stderr)
	}
	load, err := loadgen.NewRLSLoad(f.clients, mode, f.domain, f.endpoint)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	g, err := loadgen.NewGRPCCheck(f.target, min(f.conns, f.concurrency), f.timeout, load)
	if err != nil {
		return fmt.Errorf("bench: --target: %w", err)
	}
	defer g.Close()
	if host, _, _ := net.SplitHostPort(g.Target()); !isLoopback("grpc://" + net.JoinHostPort(host, "0")) {
		fmt.Fprintf(stderr, "sluice bench: note: %s is not a loopback address; this is a load test of that service\n", g.Target())
	}
	if _, err := g.NewCall(0)(ctx); err != nil {
		return fmt.Errorf("bench: %s does not answer ShouldRateLimit: %w", g.Target(), err)
	}
	if !f.json {
		pace := "as fast as possible"
		if f.rate > 0 {
			pace = fmt.Sprintf("at %g/s", f.rate)
		}
		fmt.Fprintf(stdout, "ShouldRateLimit %s (domain %s): %d callers on %d connections, %s, for %s, %d clients by %s\n",
			g.Target(), f.domain, f.concurrency, g.Conns(), pace, f.duration, f.clients, strings.Replace(mode, "ip", "remote_address", 1))
	}
	return runLoad(ctx, f, g.NewCall, stdout)
}

// runBenchHealth is `sluice bench --grpc --grpc-health`: the same load as
// grpc.health.v1.Health/Check calls, the cheapest call of the same gRPC
// server, so that ShouldRateLimit can be compared with the floor of a gRPC
// round trip on the same machine (as bench/baseline is for HTTP).
func runBenchHealth(ctx context.Context, f benchFlags, stdout, stderr io.Writer) error {
	h, err := loadgen.NewGRPCHealth(f.target, min(f.conns, f.concurrency), f.timeout)
	if err != nil {
		return fmt.Errorf("bench: --target: %w", err)
	}
	defer h.Close()
	if host, _, _ := net.SplitHostPort(h.Target()); !isLoopback("grpc://" + net.JoinHostPort(host, "0")) {
		fmt.Fprintf(stderr, "sluice bench: note: %s is not a loopback address; this is a load test of that service\n", h.Target())
	}
	if _, err := h.NewCall(0)(ctx); err != nil {
		return fmt.Errorf("bench: %s does not answer health checks: %w", h.Target(), err)
	}
	if !f.json {
		pace := "as fast as possible"
		if f.rate > 0 {
			pace = fmt.Sprintf("at %g/s", f.rate)
		}
		fmt.Fprintf(stdout, "grpc.health.v1.Health/Check %s: %d callers on %d connections, %s, for %s\n",
			h.Target(), f.concurrency, h.Conns(), pace, f.duration)
	}
	return runLoad(ctx, f, h.NewCall, stdout)
}
