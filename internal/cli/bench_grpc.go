package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/sluicehq/sluice/internal/bench/loadgen"
)

// defaultGRPCTarget is bench --grpc's --target when none is given.
const defaultGRPCTarget = "127.0.0.1:8081"

// defaultHTTPTarget is --target without --grpc.
const defaultHTTPTarget = "http://127.0.0.1:8080"

// grpcLoad is what bench --grpc drives: ShouldRateLimit or the health
// check, over shared connections.
type grpcLoad interface {
	Target() string
	Conns() int
	Close()
	NewCall(worker int) loadgen.Call
}

// runBenchGRPC is `sluice bench --grpc`: the load of runBench, as Envoy's
// ShouldRateLimit calls, or with --grpc-health as grpc.health.v1 Check
// calls — the cheapest call of the same gRPC server, so that
// ShouldRateLimit can be compared with the floor of a gRPC round trip on
// the same machine (as bench/baseline is for HTTP).
func runBenchGRPC(ctx context.Context, f benchFlags, mode string, stdout, stderr io.Writer) error {
	conns := min(f.conns, f.concurrency)
	auth, err := f.auth()
	if err != nil {
		return err
	}
	var (
		g    grpcLoad
		what string
	)
	if f.health {
		h, err := loadgen.NewGRPCHealth(f.target, conns, f.timeout, auth, loadgen.GRPCClient(f.grpcClient))
		if err != nil {
			return fmt.Errorf("bench: --target: %w", err)
		}
		g, what = h, "grpc.health.v1.Health/Check"
	} else {
		load, err := loadgen.NewRLSLoad(f.clients, mode, f.domain, f.endpoint)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		c, err := loadgen.NewGRPCCheck(f.target, conns, f.timeout, load, auth, loadgen.GRPCClient(f.grpcClient))
		if err != nil {
			return fmt.Errorf("bench: --target: %w", err)
		}
		g, what = c, "ShouldRateLimit"
	}
	defer g.Close()
	if host, _, _ := net.SplitHostPort(g.Target()); !isLoopback("grpc://" + net.JoinHostPort(host, "0")) {
		fmt.Fprintf(stderr, "sluice bench: note: %s is not a loopback address; this is a load test of that service\n", g.Target())
	}
	if _, err := g.NewCall(0)(ctx); err != nil {
		return fmt.Errorf("bench: %s does not answer %s: %w", g.Target(), what, err)
	}
	if !f.json {
		pace := "as fast as possible"
		if f.rate > 0 {
			pace = fmt.Sprintf("at %g/s", f.rate)
		}
		if f.health {
			fmt.Fprintf(stdout, "%s %s: %s on %s, %s, for %s\n",
				what, g.Target(), plural(f.concurrency, "caller"), plural(g.Conns(), "connection"), pace, f.duration)
		} else {
			fmt.Fprintf(stdout, "%s %s (domain %s): %s on %s, %s, for %s, %s by %s\n",
				what, g.Target(), f.domain, plural(f.concurrency, "caller"), plural(g.Conns(), "connection"), pace, f.duration, plural(f.clients, "client"), strings.Replace(mode, "ip", "remote_address", 1))
		}
	}
	return runLoad(ctx, f, g.NewCall, stdout)
}
