package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/internal/bench/loadgen"
	"github.com/sluicehq/sluice/internal/gctune"
)

// benchFlags are the flags of `sluice bench`.
type benchFlags struct {
	target      string
	concurrency int
	duration    time.Duration
	rate        float64
	clients     int
	ip          bool
	endpoint    string
	requests    int64
	timeout     time.Duration
	json        bool
	grpc        bool   // Envoy's ShouldRateLimit instead of POST /ratelimit/check
	domain      string // with grpc: the request's domain
	conns       int    // with grpc: HTTP/2 connections
	health      bool   // with grpc: grpc.health.v1 Check instead of ShouldRateLimit
	grpcClient  string // with grpc: loadgen.LeanClient or loadgen.GoClient
	token       string // --data-token
	ca          string // --data-ca
	clientCert  string // --data-client-cert
	clientKey   string // --data-client-key
}

// auth is how the load reaches a sluice with --data-token or TLS.
func (f *benchFlags) auth() (loadgen.Auth, error) {
	tc, err := clientTLS(f.ca, f.clientCert, f.clientKey, "--data-ca", "--data-client-cert", "--data-client-key")
	if err != nil {
		return loadgen.Auth{}, fmt.Errorf("bench: %w", err)
	}
	if strings.Contains(f.token, ",") {
		return loadgen.Auth{}, errors.New("bench: --data-token: give one token, not a comma-separated list")
	}
	return loadgen.Auth{TLS: tc, Token: strings.TrimSpace(f.token)}, nil
}

func newBenchCmd() *cobra.Command {
	f := benchFlags{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load a running sluice's POST /ratelimit/check and report decisions/s and latency",
		Long: `Generate load against a running sluice's decision API (POST
/ratelimit/check) and report decisions per second, allowed and denied
counts, errors and latency percentiles.

Each of --concurrency workers keeps one keep-alive HTTP/1.1 connection and
one call in flight. Calls name a client drawn at random from a keyspace of
--clients ("user": "u<n>", or with --ip an address 10.x.y.z), with request
bodies built before the run. The run stops by itself after --duration, or
after --requests calls when that comes first.

With --rate 0 (the default) the workers go as fast as they can: the figure
is the service's throughput. With --rate N the calls are scheduled at a
fixed N per second in total, and each call's latency is measured from the
moment it was due, so a service that stalls shows in the percentiles rather
than slowing the generator down (no coordinated omission). If the workers
cannot keep the schedule, the report says so.

Latencies go into a log-linear histogram with better than 1% precision.

With --grpc, the calls are Envoy's ShouldRateLimit on sluice's
--grpc-listen (--target host:port, default 127.0.0.1:8081): one descriptor
per call with the entries user (or remote_address with --ip), method and
path, in --domain. gRPC multiplexes calls, so the --concurrency workers
share --grpc-conns HTTP/2 connections; each still has one call in flight.
With --grpc --grpc-health the calls are the standard grpc.health.v1 Check
of the same server instead: the floor of a gRPC call on that machine, to
compare ShouldRateLimit with (bench/grpc.sh alternates the two). Every
answer's gRPC status and overall_code are checked. The calls go through
sluice's own lean HTTP/2 client, which takes a fraction of grpc-go's CPU
per call from the machine the service runs on; --grpc-client grpc-go
calls through grpc-go instead.

Run it against a sluice on the same machine or your own test network
(loopback is the norm): it is a load test, and on a shared or production
service it takes capacity from real callers.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if f.target == "" {
				f.target = defaultHTTPTarget
				if f.grpc {
					f.target = defaultGRPCTarget
				}
			}
			return runBench(ctx, f, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.target, "target", "", "base URL of the sluice data plane (default "+defaultHTTPTarget+"); with --grpc, host:port of its --grpc-listen (default "+defaultGRPCTarget+")")
	fl.IntVar(&f.concurrency, "concurrency", 64, "workers, each with one connection and one call in flight")
	fl.DurationVar(&f.duration, "duration", 10*time.Second, "how long to generate load")
	fl.Float64Var(&f.rate, "rate", 0, "total calls per second; 0: as fast as possible")
	fl.IntVar(&f.clients, "clients", 100000, "number of distinct clients to draw from")
	fl.BoolVar(&f.ip, "ip", false, "identify clients by IP address instead of user id")
	fl.StringVar(&f.endpoint, "endpoint", "GET /api/orders", `endpoint the calls name, "METHOD /path"`)
	fl.Int64Var(&f.requests, "requests", 0, "stop after this many calls; 0: no cap")
	fl.DurationVar(&f.timeout, "timeout", 5*time.Second, "timeout of each call")
	fl.BoolVar(&f.json, "json", false, "print the result as one JSON object")
	fl.BoolVar(&f.grpc, "grpc", false, "call Envoy's ShouldRateLimit over gRPC (--target host:port) instead of the HTTP API")
	fl.StringVar(&f.domain, "domain", "sluice", "with --grpc: the domain of the requests")
	fl.IntVar(&f.conns, "grpc-conns", 4, "with --grpc: HTTP/2 connections the workers share (at most --concurrency)")
	fl.BoolVar(&f.health, "grpc-health", false, "with --grpc: call grpc.health.v1.Health/Check instead, the floor of a gRPC call on the same server")
	fl.StringVar(&f.grpcClient, "grpc-client", string(loadgen.LeanClient), "with --grpc: the client, "+string(loadgen.LeanClient)+" (sluice's own HTTP/2 client, a few µs of CPU per call) or "+string(loadgen.GoClient))
	fl.StringVar(&f.token, "data-token", "", "bearer token sent with every call: one of sluice serve --data-token's")
	fl.StringVar(&f.ca, "data-ca", "", "PEM CA certificate(s) the server's TLS certificate is checked against; with --grpc, also turns TLS on (HTTP: an https:// --target)")
	fl.StringVar(&f.clientCert, "data-client-cert", "", "PEM client certificate, for a server with --tls-client-ca (with --grpc, also turns TLS on)")
	fl.StringVar(&f.clientKey, "data-client-key", "", "PEM private key of --data-client-cert")
	return cmd
}

func (f *benchFlags) validate() error {
	switch {
	case f.concurrency < 1 || f.concurrency > 10000:
		return fmt.Errorf("bench: --concurrency must be 1 to 10000, got %d", f.concurrency)
	case f.duration <= 0 || f.duration > 24*time.Hour:
		return fmt.Errorf("bench: --duration must be more than 0 and at most 24h, got %s", f.duration)
	case f.rate < 0 || math.IsNaN(f.rate) || math.IsInf(f.rate, 0) || f.rate > 1e8:
		return fmt.Errorf("bench: --rate must be 0 (as fast as possible) to 1e8, got %g", f.rate)
	case f.requests < 0:
		return fmt.Errorf("bench: --requests must be ≥ 0, got %d", f.requests)
	case f.timeout <= 0:
		return fmt.Errorf("bench: --timeout must be > 0, got %s", f.timeout)
	case f.health && !f.grpc:
		return fmt.Errorf("bench: --grpc-health needs --grpc")
	case f.grpc && (f.conns < 1 || f.conns > 1000):
		return fmt.Errorf("bench: --grpc-conns must be 1 to 1000, got %d", f.conns)
	case f.grpcClient != string(loadgen.LeanClient) && f.grpcClient != string(loadgen.GoClient):
		return fmt.Errorf("bench: --grpc-client must be %s or %s, got %q", loadgen.LeanClient, loadgen.GoClient, f.grpcClient)
	}
	return nil
}

func runBench(ctx context.Context, f benchFlags, stdout, stderr io.Writer) error {
	if err := f.validate(); err != nil {
		return err
	}
	// The generator's own collections would show in the percentiles it
	// measures (see internal/gctune).
	defer gctune.Floor(256 << 20).Stop()
	mode := "user"
	if f.ip {
		mode = "ip"
	}
	if f.grpc {
		return runBenchGRPC(ctx, f, mode, stdout, stderr)
	}
	auth, err := f.auth()
	if err != nil {
		return err
	}
	bodies, err := loadgen.CheckBodies(f.clients, mode, f.endpoint)
	if err != nil {
		return fmt.Errorf("bench: --clients: %w", err)
	}
	h, err := loadgen.NewHTTPCheck(f.target, f.concurrency, f.timeout, bodies, auth)
	if err != nil {
		return fmt.Errorf("bench: --target: %w", err)
	}
	defer h.Close()
	if !isLoopback(f.target) {
		fmt.Fprintf(stderr, "sluice bench: note: %s is not a loopback address; this is a load test of that service\n", f.target)
	}
	// One call first, so that a wrong target or a service that rejects the
	// calls fails at once with its reason rather than after --duration.
	if _, err := h.NewCall(0)(ctx); err != nil {
		return fmt.Errorf("bench: %s does not answer checks: %w", h.URL(), err)
	}
	if !f.json {
		pace := "as fast as possible"
		if f.rate > 0 {
			pace = fmt.Sprintf("at %g/s", f.rate)
		}
		fmt.Fprintf(stdout, "POST %s: %s, %s, for %s, %s by %s\n",
			h.URL(), plural(f.concurrency, "connection"), pace, f.duration, plural(f.clients, "client"), mode)
	}
	return runLoad(ctx, f, h.NewCall, stdout)
}

// runLoad runs the load with newCall and prints the report.
func runLoad(ctx context.Context, f benchFlags, newCall func(int) loadgen.Call, stdout io.Writer) error {
	res, err := loadgen.Run(ctx, loadgen.Config{
		Concurrency: f.concurrency,
		Duration:    f.duration,
		Rate:        f.rate,
		Requests:    f.requests,
		NewCall:     newCall,
	})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	rep := newBenchReport(f, res)
	if f.json {
		err = writeJSON(stdout, rep)
	} else {
		err = rep.writeText(stdout)
	}
	if err != nil {
		return err
	}
	if res.Requests > 0 && res.Errors == res.Requests {
		return fmt.Errorf("bench: every call failed: %w", res.FirstErr)
	}
	if ctx.Err() != nil {
		return errors.New("bench: interrupted; the figures above cover the calls made until then")
	}
	return nil
}

// isLoopback reports whether the target URL's host is a loopback address
// or localhost.
func isLoopback(target string) bool {
	u, err := url.Parse(target)
	if err != nil {
		return false
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// benchReport is what `sluice bench` prints; with --json, as is.
type benchReport struct {
	DecisionsPerSec float64   `json:"decisions_per_sec"`
	Requests        int64     `json:"requests"`
	Allowed         int64     `json:"allowed"`
	Denied          int64     `json:"denied"`
	Errors          int64     `json:"errors"`
	LatencyMS       latencyMS `json:"latency_ms"`
	Concurrency     int       `json:"concurrency"`
	DurationS       float64   `json:"duration_s"` // measured, from the first call to the last answer
	Rate            float64   `json:"rate"`       // the --rate asked for; 0: as fast as possible
	Late            int64     `json:"late,omitempty"`
	Missed          int64     `json:"missed,omitempty"`
	FirstError      string    `json:"first_error,omitempty"`
	Target          string    `json:"target"`
	health          bool      // --grpc-health: the calls are health checks
}

type latencyMS struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

func newBenchReport(f benchFlags, res *loadgen.Result) *benchReport {
	ms := func(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 } // µs precision
	r := &benchReport{
		DecisionsPerSec: math.Round(res.PerSecond()*10) / 10,
		Requests:        res.Requests,
		Allowed:         res.Allowed,
		Denied:          res.Denied,
		Errors:          res.Errors,
		LatencyMS: latencyMS{
			P50:  ms(res.Latency.Quantile(0.50)),
			P90:  ms(res.Latency.Quantile(0.90)),
			P99:  ms(res.Latency.Quantile(0.99)),
			P999: ms(res.Latency.Quantile(0.999)),
			Max:  ms(res.Latency.Max()),
		},
		Concurrency: f.concurrency,
		DurationS:   math.Round(res.Elapsed.Seconds()*1000) / 1000,
		Rate:        f.rate,
		Late:        res.Late,
		Missed:      res.Missed,
		Target:      f.target,
		health:      f.grpc && f.health,
	}
	if res.FirstErr != nil {
		r.FirstError = res.FirstErr.Error()
	}
	return r
}

func (r *benchReport) writeText(w io.Writer) error {
	if r.health {
		// --grpc-health: calls of the health service, which decide nothing.
		fmt.Fprintf(w, "health checks %d in %.2fs: %.0f checks/s\n", r.Requests, r.DurationS, r.DecisionsPerSec)
		fmt.Fprintf(w, "outcomes    %d serving, %d errors\n", r.Allowed, r.Errors)
	} else {
		fmt.Fprintf(w, "decisions   %d in %.2fs: %.0f decisions/s\n", r.Requests, r.DurationS, r.DecisionsPerSec)
		fmt.Fprintf(w, "outcomes    %d allowed, %d denied, %d errors\n", r.Allowed, r.Denied, r.Errors)
	}
	l := r.LatencyMS
	fmt.Fprintf(w, "latency     p50 %.3fms  p90 %.3fms  p99 %.3fms  p99.9 %.3fms  max %.3fms\n", l.P50, l.P90, l.P99, l.P999, l.Max)
	if r.FirstError != "" {
		fmt.Fprintf(w, "first error %s\n", r.FirstError)
	}
	if r.Late > 0 || r.Missed > 0 {
		fmt.Fprintf(w, "behind      the workers could not keep --rate %g: %d calls sent late (their latency includes the wait), %d never sent; raise --concurrency\n",
			r.Rate, r.Late, r.Missed)
	}
	return nil
}

// plural is "1 connection", "4 connections".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
