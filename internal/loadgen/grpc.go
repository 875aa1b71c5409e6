package loadgen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// RLSRequests pre-builds n distinct Envoy ShouldRateLimit requests in
// domain, one per client of the keyspace, as CheckBodies does for the HTTP
// API: one descriptor with the entries user "u<i>" (or, in "ip" mode,
// remote_address 10.x.y.z numbered i), method and path from endpoint
// ("METHOD /path").
func RLSRequests(n int, mode, domain, endpoint string) ([]*rlsv3.RateLimitRequest, error) {
	if n < 1 {
		return nil, fmt.Errorf("loadgen: clients must be ≥ 1, got %d", n)
	}
	if n > 1<<24 {
		return nil, fmt.Errorf("loadgen: clients must be ≤ %d, got %d", 1<<24, n)
	}
	if domain == "" {
		return nil, fmt.Errorf("loadgen: the domain must not be empty")
	}
	method, path, ok := strings.Cut(endpoint, " ")
	if !ok || method == "" || path == "" {
		return nil, fmt.Errorf(`loadgen: endpoint must be "METHOD /path", got %q`, endpoint)
	}
	reqs := make([]*rlsv3.RateLimitRequest, n)
	for i := range reqs {
		var who *ratelimitv3.RateLimitDescriptor_Entry
		switch mode {
		case "user":
			who = &ratelimitv3.RateLimitDescriptor_Entry{Key: "user", Value: "u" + strconv.Itoa(i)}
		case "ip":
			who = &ratelimitv3.RateLimitDescriptor_Entry{Key: "remote_address",
				Value: fmt.Sprintf("10.%d.%d.%d", i>>16&0xff, i>>8&0xff, i&0xff)}
		default:
			return nil, fmt.Errorf("loadgen: client mode must be user or ip, got %q", mode)
		}
		reqs[i] = &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{who,
				{Key: "method", Value: method},
				{Key: "path", Value: path}},
		}}}
	}
	return reqs, nil
}

// GRPCCheck calls Envoy's ShouldRateLimit on a sluice --grpc-listen over a
// few HTTP/2 connections shared by the workers (gRPC multiplexes calls on
// a connection), each call with a request drawn at random from a pre-built
// set. It is safe for concurrent use; each worker uses its own Call.
type GRPCCheck struct {
	target  string
	conns   []*grpc.ClientConn
	clients []rlsv3.RateLimitServiceClient
	reqs    []*rlsv3.RateLimitRequest
	timeout time.Duration
	seed    uint64
}

// NewGRPCCheck returns a GRPCCheck against target ("host:port", or
// "grpc://host:port") with conns connections and a per-call timeout.
func NewGRPCCheck(target string, conns int, timeout time.Duration, reqs []*rlsv3.RateLimitRequest) (*GRPCCheck, error) {
	addr := strings.TrimPrefix(target, "grpc://")
	if _, _, err := net.SplitHostPort(addr); err != nil || strings.Contains(addr, "/") {
		return nil, fmt.Errorf("loadgen: target must be host:port or grpc://host:port, got %q", target)
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("loadgen: no requests")
	}
	g := &GRPCCheck{target: addr, reqs: reqs, timeout: timeout, seed: rand.Uint64()}
	for range max(conns, 1) {
		// Each connection its own: without an authority of its own, gRPC
		// would still open one TCP connection per ClientConn.
		cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("loadgen: %w", err)
		}
		g.conns = append(g.conns, cc)
		g.clients = append(g.clients, rlsv3.NewRateLimitServiceClient(cc))
	}
	return g, nil
}

// Target returns the address called.
func (g *GRPCCheck) Target() string { return g.target }

// Conns returns the number of connections.
func (g *GRPCCheck) Conns() int { return len(g.conns) }

// Close closes the connections.
func (g *GRPCCheck) Close() {
	for _, cc := range g.conns {
		cc.Close()
	}
}

// NewCall returns worker's Call: its connection (worker modulo the
// connections) and its own random source.
func (g *GRPCCheck) NewCall(worker int) Call {
	rng := rand.New(rand.NewPCG(g.seed, uint64(worker)))
	c := g.clients[worker%len(g.clients)]
	return func(ctx context.Context) (bool, error) {
		ctx, cancel := context.WithTimeout(ctx, g.timeout)
		defer cancel()
		resp, err := c.ShouldRateLimit(ctx, g.reqs[rng.IntN(len(g.reqs))])
		if err != nil {
			return false, err
		}
		switch resp.GetOverallCode() {
		case rlsv3.RateLimitResponse_OK:
			return true, nil
		case rlsv3.RateLimitResponse_OVER_LIMIT:
			return false, nil
		}
		return false, fmt.Errorf("loadgen: answer with overall_code %s", resp.GetOverallCode())
	}
}
