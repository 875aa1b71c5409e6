package loadgen

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/encoding/protowire"
)

// RLSLoad describes the requests of a ShouldRateLimit load, as CheckBodies
// does for the HTTP API: in Domain, one descriptor per call with the
// entries Key: Values[i] (the client, drawn at random), method and path.
// Only the client names are kept, not a request per client: a worker
// reuses one request and sets its client before each call, as a proxy
// builds a fresh request per call, and the generator's heap stays small
// (100,000 pre-built requests cost the generator 18 ms garbage collections
// that showed in its percentiles).
type RLSLoad struct {
	Domain       string
	Key          string // "user" or "remote_address"
	Values       []string
	Method, Path string
}

// NewRLSLoad returns the load of n clients: in "user" mode client i is
// user "u<i>", in "ip" mode remote_address 10.x.y.z numbered i; method and
// path are from endpoint ("METHOD /path").
func NewRLSLoad(n int, mode, domain, endpoint string) (*RLSLoad, error) {
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
	l := &RLSLoad{Domain: domain, Method: method, Path: path, Values: make([]string, n)}
	switch mode {
	case "user":
		l.Key = "user"
		for i := range l.Values {
			l.Values[i] = "u" + strconv.Itoa(i)
		}
	case "ip":
		l.Key = "remote_address"
		for i := range l.Values {
			l.Values[i] = fmt.Sprintf("10.%d.%d.%d", i>>16&0xff, i>>8&0xff, i&0xff)
		}
	default:
		return nil, fmt.Errorf("loadgen: client mode must be user or ip, got %q", mode)
	}
	return l, nil
}

// Request returns a new request for client i.
func (l *RLSLoad) Request(i int) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: l.Domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{
			{Key: l.Key, Value: l.Values[i]},
			{Key: "method", Value: l.Method},
			{Key: "path", Value: l.Path}},
	}}}
}

// AppendRequest appends to b the gRPC message of client i's request (the
// 5-byte length prefix, then the protobuf encoding of Request(i)), built
// without a proto message: the lean client's calls allocate nothing.
func (l *RLSLoad) AppendRequest(b []byte, i int) []byte {
	entry := func(k, v string) int {
		return protowire.SizeTag(1) + protowire.SizeBytes(len(k)) + protowire.SizeTag(2) + protowire.SizeBytes(len(v))
	}
	e1, e2, e3 := entry(l.Key, l.Values[i]), entry("method", l.Method), entry("path", l.Path)
	desc := protowire.SizeTag(1)*3 + protowire.SizeBytes(e1) + protowire.SizeBytes(e2) + protowire.SizeBytes(e3)
	n := protowire.SizeTag(2) + protowire.SizeBytes(desc)
	if l.Domain != "" {
		n += protowire.SizeTag(1) + protowire.SizeBytes(len(l.Domain))
	}
	b = append(b, 0, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	if l.Domain != "" {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, l.Domain)
	}
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(desc))
	for _, e := range [3]struct {
		size int
		k, v string
	}{{e1, l.Key, l.Values[i]}, {e2, "method", l.Method}, {e3, "path", l.Path}} {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(e.size))
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, e.k)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, e.v)
	}
	return b
}

// enumField returns the last value of varint field num of the protobuf
// message m (0 when absent, as proto3 reads it), checking that all of m
// parses.
func enumField(m []byte, num protowire.Number) (uint64, error) {
	var v uint64
	for len(m) > 0 {
		n, typ, k := protowire.ConsumeTag(m)
		if k < 0 {
			return 0, fmt.Errorf("loadgen: malformed reply: %w", protowire.ParseError(k))
		}
		m = m[k:]
		if n == num && typ == protowire.VarintType {
			x, k := protowire.ConsumeVarint(m)
			if k < 0 {
				return 0, fmt.Errorf("loadgen: malformed reply: %w", protowire.ParseError(k))
			}
			v, m = x, m[k:]
			continue
		}
		k = protowire.ConsumeFieldValue(n, typ, m)
		if k < 0 {
			return 0, fmt.Errorf("loadgen: malformed reply: %w", protowire.ParseError(k))
		}
		m = m[k:]
	}
	return v, nil
}

// overallCode reads a RateLimitResponse: allowed for OK, denied for
// OVER_LIMIT, an error for anything else.
func overallCode(m []byte) (bool, error) {
	c, err := enumField(m, 1)
	if err != nil {
		return false, err
	}
	switch rlsv3.RateLimitResponse_Code(c) {
	case rlsv3.RateLimitResponse_OK:
		return true, nil
	case rlsv3.RateLimitResponse_OVER_LIMIT:
		return false, nil
	}
	return false, fmt.Errorf("loadgen: answer with overall_code %s", rlsv3.RateLimitResponse_Code(c))
}

// GRPCClient is the client a gRPC load is sent with.
type GRPCClient string

const (
	// LeanClient is loadgen's own HTTP/2 client (h2.go): requests encoded
	// once, replies decoded as far as the answer, no allocation per
	// call. The default: the generator takes the least CPU from the
	// service it measures on the same machine.
	LeanClient GRPCClient = "lean"
	// GoClient is grpc-go with its proto codec, as gRPC services' own
	// clients call.
	GoClient GRPCClient = "grpc-go"
)

// grpcConns are the HTTP/2 connections a gRPC load shares: each worker
// uses connection worker modulo their number.
type grpcConns struct {
	target  string
	conns   []*grpc.ClientConn // GoClient
	lean    []*leanClient      // LeanClient
	timeout time.Duration
}

// dialGRPC opens conns connections to target ("host:port" or
// "grpc://host:port") with client, each call bounded by timeout. The lean
// client dials on first use.
func dialGRPC(target string, conns int, timeout time.Duration, auth Auth, client GRPCClient) (*grpcConns, error) {
	addr := strings.TrimPrefix(target, "grpc://")
	if _, _, err := net.SplitHostPort(addr); err != nil || strings.Contains(addr, "/") {
		return nil, fmt.Errorf("loadgen: target must be host:port or grpc://host:port, got %q", target)
	}
	g := &grpcConns{target: addr, timeout: timeout}
	switch client {
	case LeanClient:
		for range max(conns, 1) {
			g.lean = append(g.lean, &leanClient{addr: addr, tls: auth.TLS, timeout: timeout,
				recvWindow: leanDefaultWindow, token: auth.Token})
		}
		return g, nil
	case GoClient:
	default:
		return nil, fmt.Errorf("loadgen: gRPC client must be %s or %s, got %q", LeanClient, GoClient, client)
	}
	for range max(conns, 1) {
		// Each connection its own: without an authority of its own, gRPC
		// would still open one TCP connection per ClientConn.
		cc, err := grpc.NewClient("passthrough:///"+addr, auth.grpcOptions()...)
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("loadgen: %w", err)
		}
		g.conns = append(g.conns, cc)
	}
	return g, nil
}

// Target returns the address called.
func (g *grpcConns) Target() string { return g.target }

// Conns returns the number of connections.
func (g *grpcConns) Conns() int { return len(g.conns) + len(g.lean) }

// Close closes the connections.
func (g *grpcConns) Close() {
	for _, cc := range g.conns {
		cc.Close()
	}
	for _, l := range g.lean {
		l.close()
	}
}

// leanCall returns worker's lean call of method path.
func (g *grpcConns) leanCall(worker int, path string) *leanCall {
	return newLeanCall(g.lean[worker%len(g.lean)], path)
}

// conn returns worker's connection.
func (g *grpcConns) conn(worker int) *grpc.ClientConn { return g.conns[worker%len(g.conns)] }

// GRPCCheck calls Envoy's ShouldRateLimit on a sluice --grpc-listen over a
// few HTTP/2 connections shared by the workers (gRPC multiplexes calls on
// a connection), each call for a client drawn at random from an RLSLoad.
// It is safe for concurrent use; each worker uses its own Call.
type GRPCCheck struct {
	*grpcConns
	load *RLSLoad
	seed uint64
}

// NewGRPCCheck returns a GRPCCheck of load against target ("host:port",
// or "grpc://host:port") with conns connections of client and a per-call
// timeout.
func NewGRPCCheck(target string, conns int, timeout time.Duration, load *RLSLoad, auth Auth, client GRPCClient) (*GRPCCheck, error) {
	if load == nil || len(load.Values) == 0 {
		return nil, fmt.Errorf("loadgen: no requests")
	}
	g, err := dialGRPC(target, conns, timeout, auth, client)
	if err != nil {
		return nil, err
	}
	return &GRPCCheck{grpcConns: g, load: load, seed: rand.Uint64()}, nil
}

// NewCall returns worker's Call: its connection, its own random source and
// request.
func (g *GRPCCheck) NewCall(worker int) Call {
	rng := rand.New(rand.NewPCG(g.seed, uint64(worker)))
	if g.lean != nil {
		lc := g.leanCall(worker, shouldRateLimitPath)
		var body []byte
		return func(ctx context.Context) (bool, error) {
			body = g.load.AppendRequest(body[:0], rng.IntN(len(g.load.Values)))
			m, err := lc.do(ctx, body)
			if err != nil {
				return false, err
			}
			return overallCode(m)
		}
	}
	c := rlsv3.NewRateLimitServiceClient(g.conn(worker))
	req := g.load.Request(0)
	who := req.Descriptors[0].Entries[0]
	return func(ctx context.Context) (bool, error) {
		ctx, cancel := context.WithTimeout(ctx, g.timeout)
		defer cancel()
		who.Value = g.load.Values[rng.IntN(len(g.load.Values))]
		resp, err := c.ShouldRateLimit(ctx, req)
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

// The methods' paths.
const (
	shouldRateLimitPath = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	healthCheckPath     = "/grpc.health.v1.Health/Check"
)

// GRPCHealth calls the standard grpc.health.v1.Health/Check on a gRPC
// server, over the same kind of shared connections as GRPCCheck: the
// cheapest call a gRPC server answers, and so the floor under
// ShouldRateLimit's latency on the same server and machine.
type GRPCHealth struct {
	*grpcConns
}

// NewGRPCHealth returns a GRPCHealth against target ("host:port") with
// conns connections of client and a per-call timeout.
func NewGRPCHealth(target string, conns int, timeout time.Duration, auth Auth, client GRPCClient) (*GRPCHealth, error) {
	g, err := dialGRPC(target, conns, timeout, auth, client)
	if err != nil {
		return nil, err
	}
	return &GRPCHealth{g}, nil
}

// NewCall returns worker's Call: a health check on its connection,
// "allowed" when the server is SERVING.
func (h *GRPCHealth) NewCall(worker int) Call {
	if h.lean != nil {
		lc := h.leanCall(worker, healthCheckPath)
		empty := []byte{0, 0, 0, 0, 0} // HealthCheckRequest{}: no service named
		return func(ctx context.Context) (bool, error) {
			m, err := lc.do(ctx, empty)
			if err != nil {
				return false, err
			}
			s, err := enumField(m, 1)
			return err == nil && healthpb.HealthCheckResponse_ServingStatus(s) == healthpb.HealthCheckResponse_SERVING, err
		}
	}
	c := healthpb.NewHealthClient(h.conn(worker))
	req := &healthpb.HealthCheckRequest{}
	return func(ctx context.Context) (bool, error) {
		ctx, cancel := context.WithTimeout(ctx, h.timeout)
		defer cancel()
		resp, err := c.Check(ctx, req)
		if err != nil {
			return false, err
		}
		return resp.GetStatus() == healthpb.HealthCheckResponse_SERVING, nil
	}
}

// Auth is how a load reaches a protected sluice: over TLS with TLS (nil:
// plain TCP for gRPC; an https:// target with the system's CAs), and with
// Token as "Authorization: Bearer <Token>" ("": none). The zero value is
// neither.
type Auth struct {
	TLS   *tls.Config
	Token string
}

// grpcOptions are the dial options of a.
func (a Auth) grpcOptions() []grpc.DialOption {
	creds := insecure.NewCredentials()
	if a.TLS != nil {
		creds = credentials.NewTLS(a.TLS)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if a.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{md: map[string]string{"authorization": "Bearer " + a.Token}}))
	}
	return opts
}

// bearer sends the token with every call.
type bearer struct {
	md map[string]string
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return b.md, nil
}

// RequireTransportSecurity is false so that a token also reaches a
// sluice on loopback without TLS.
func (b bearer) RequireTransportSecurity() bool { return false }
