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
	reqs, err := loadgen.RLSRequests(f.clients, mode, f.domain, f.endpoint)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	g, err := loadgen.NewGRPCCheck(f.target, min(f.conns, f.concurrency), f.timeout, reqs)
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
