// Package gateway is `sluice gateway`: a reverse proxy whose first step is
// the rate-limiting filter of package middleware. A denied call is answered
// 429 from its request line and headers alone and never reaches the
// upstream; an allowed one is proxied with the quota headers added to the
// upstream's response.
//
//	client → target (the path the upstream gets) → middleware (identity →
//	       limiter → 429 | quota headers)
//	       → http1.Client (HTTP/1.1, pooled connections) → upstream
//	         | httputil.ReverseProxy (https, upgrades, Expect, request
//	           trailers; every call with Engine "std")
//
// The HTTP/1.1 engine, a server loop for the proxy port and the upstream
// client, is package http1; Config.Engine "std" turns it off and serves
// every call with net/http and httputil.ReverseProxy alone.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/sluicehq/sluice/headers"
	"github.com/sluicehq/sluice/internal/http1"
	"github.com/sluicehq/sluice/internal/jsonhttp"
	"github.com/sluicehq/sluice/internal/listen"
	"github.com/sluicehq/sluice/internal/ratelog"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/middleware"
)

// Error codes of the gateway's own JSON errors
// {"error":"<code>","message":"..."}.
const (
	CodeBadGateway     = "bad_gateway"     // 502: the upstream could not be reached or broke off
	CodeGatewayTimeout = "gateway_timeout" // 504: the upstream did not answer in time
	CodeUnavailable    = "unavailable"     // 503: the limiter could not decide
	CodeSlowBody       = "request_timeout" // 408: the request body arrived too slowly (listen.MinBodyRate)
)

// Config configures a Gateway. Zero durations take their default.
type Config struct {
	// Upstream is where allowed calls go: scheme and host, and a path
	// prefix joined in front of the call's path. Required.
	Upstream *url.URL
	// DialTimeout bounds connecting to the upstream. Default 5 s.
	DialTimeout time.Duration
	// ResponseTimeout bounds the wait for the upstream's response headers
	// once the request is sent (504 when it passes). The body is streamed
	// with no time limit, so long downloads and streams are not cut.
	// Default 30 s.
	ResponseTimeout time.Duration
	// MaxIdleConns is the number of idle keep-alive connections kept to
	// the upstream. Default 1024: with fewer than the concurrent calls,
	// every call beyond them opens a new connection.
	MaxIdleConns int
	// MaxResponseHeaderBytes bounds an upstream answer's status line and
	// headers (interim 1xx answers included): past it the call is
	// answered 502 and the connection closed, rather than the headers
	// held in memory and relayed whole. Default 64 KiB, the bound of a
	// request's headers (--max-header-bytes).
	MaxResponseHeaderBytes int
	// Identifier says who calls are from and which proxies in front of
	// the gateway are trusted; the same list decides whether incoming
	// X-Forwarded-* headers are passed on. Default: the zero Identifier.
	Identifier *middleware.Identifier
	// Middleware holds further options of the filter (cost, endpoint).
	Middleware []middleware.Option
	// Logger receives upstream and limiter failures (rate-limited to one
	// line a second each). Default: discard.
	Logger *slog.Logger
	// Engine is the HTTP/1.1 engine calls to a plain-HTTP upstream go
	// through: EngineFast (the default, "") the gateway's own client
	// (package http1), EngineStd httputil.ReverseProxy over
	// http.Transport for every call. The proxy port's server follows the
	// same choice (see Engine).
	Engine string
}

// The engines of Config.Engine (--http-engine).
const (
	EngineFast = "fast" // package http1's server loop and upstream client, net/http for what they do not take
	EngineStd  = "std"  // net/http's server and httputil.ReverseProxy for every call
)

// DefaultConfig returns the defaults, without an upstream.
func DefaultConfig() Config {
	return Config{DialTimeout: 5 * time.Second, ResponseTimeout: 30 * time.Second, MaxIdleConns: 1024, MaxResponseHeaderBytes: 64 << 10}
}

// Validate reports whether c is usable.
func (c Config) Validate() error {
	switch {
	case c.Upstream == nil:
		return errors.New("gateway: an upstream URL is required")
	case c.Upstream.Scheme != "http" && c.Upstream.Scheme != "https":
		return fmt.Errorf("gateway: upstream %q: scheme must be http or https", c.Upstream.Redacted())
	case c.Upstream.Host == "":
		return fmt.Errorf("gateway: upstream %q: no host", c.Upstream.Redacted())
	case c.Upstream.RawQuery != "" || c.Upstream.Fragment != "":
		return fmt.Errorf("gateway: upstream %q: must not have a query or fragment", c.Upstream.Redacted())
	case c.Engine != "" && c.Engine != EngineFast && c.Engine != EngineStd:
		return fmt.Errorf("gateway: engine %q: must be %s or %s", c.Engine, EngineFast, EngineStd)
	case c.DialTimeout < 0 || c.ResponseTimeout < 0 || c.MaxIdleConns < 0 || c.MaxResponseHeaderBytes < 0:
		return errors.New("gateway: timeouts, connection counts and sizes must not be negative")
	}
	return nil
}

// Gateway is the rate-limiting reverse proxy, an http.Handler. Safe for
// concurrent use.
type Gateway struct {
	h         http.Handler
	transport *http.Transport // the ReverseProxy path: https, upgrades, Expect, request trailers
	client    *http1.Client   // plain-HTTP upstreams, engine fast: every other call
	log       *slog.Logger
	id        middleware.Identifier
	target    *url.URL

	failures ratelog.Limiter // upstream and limiter failures: one line a second
}

// New returns a gateway deciding calls with l and proxying the allowed
// ones to cfg.Upstream.
func New(l *limiter.Limiter, cfg Config) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := DefaultConfig()
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = d.DialTimeout
	}
	if cfg.ResponseTimeout == 0 {
		cfg.ResponseTimeout = d.ResponseTimeout
	}
	if cfg.MaxIdleConns == 0 {
		cfg.MaxIdleConns = d.MaxIdleConns
	}
	if cfg.MaxResponseHeaderBytes == 0 {
		cfg.MaxResponseHeaderBytes = d.MaxResponseHeaderBytes
	}
	g := &Gateway{log: cfg.Logger, target: cfg.Upstream}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Identifier != nil {
		g.id = *cfg.Identifier
	}
	g.transport = &http.Transport{
		Proxy:                  nil, // the upstream is reached directly, whatever HTTP_PROXY says
		DialContext:            (&net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:           cfg.MaxIdleConns,
		MaxIdleConnsPerHost:    cfg.MaxIdleConns,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    cfg.DialTimeout,
		ResponseHeaderTimeout:  cfg.ResponseTimeout,
		ExpectContinueTimeout:  time.Second,
		DisableCompression:     true, // pass Accept-Encoding and bodies through untouched
		MaxResponseHeaderBytes: int64(cfg.MaxResponseHeaderBytes),
	}
	proxy := func(dropQuota bool) *httputil.ReverseProxy {
		p := &httputil.ReverseProxy{
			Rewrite:      g.rewrite,
			Transport:    g.transport,
			BufferPool:   http1.BufferPool{},
			ErrorHandler: g.upstreamError,
			ErrorLog:     slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
		}
		if dropQuota {
			p.ModifyResponse = dropQuotaHeaders
		}
		return p
	}
	// The quota headers on the response are the gateway's: when a rule
	// matched, the upstream's own headers of those names are dropped
	// rather than sent twice.
	withQuota, withoutQuota := proxy(true), proxy(false)
	if cfg.Upstream.Scheme == "http" && cfg.Engine != EngineStd {
		g.client = http1.NewClient(http1.ClientConfig{
			Upstream:               cfg.Upstream,
			DialTimeout:            cfg.DialTimeout,
			ResponseTimeout:        cfg.ResponseTimeout,
			MaxIdleConns:           cfg.MaxIdleConns,
			MaxResponseHeaderBytes: cfg.MaxResponseHeaderBytes,
			Forwarded:              g.forwarding,
		})
	}
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, quota := w.Header()[headers.Limit]
		switch {
		case g.client != nil && g.client.Takes(r):
			g.forward(w, r, quota)
		case quota:
			withQuota.ServeHTTP(w, r)
		default:
			withoutQuota.ServeHTTP(w, r)
		}
	})
	opts := append([]middleware.Option{
		middleware.WithIdentifier(&g.id),
		middleware.WithErrorHandler(g.limiterError),
	}, cfg.Middleware...)
	limited := middleware.Middleware(l, opts...)(inner)
	g.h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !upstreamPath(r.URL) {
			badTarget(w)
			return
		}
		limited.ServeHTTP(w, r)
	})
	return g, nil
}

// ServeHTTP implements http.Handler.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.h.ServeHTTP(w, r) }

// Close closes the idle connections to the upstream.
func (g *Gateway) Close() {
	g.transport.CloseIdleConnections()
	if g.client != nil {
		g.client.CloseIdle()
	}
}

// quotaHeaders are the headers the gateway sets on allowed calls.
var quotaHeaders = [...]string{headers.Limit, headers.Remaining, headers.Reset, headers.Policy, headers.RateLimit}

func isQuotaHeader(k string) bool {
	for _, h := range quotaHeaders {
		if k == h {
			return true
		}
	}
	return false
}

func dropQuotaHeaders(res *http.Response) error {
	for _, h := range quotaHeaders {
		delete(res.Header, h)
	}
	return nil
}

// forward sends r through the gateway's own client; quota drops the
// upstream's quota headers (a rule matched: the gateway's stand).
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, quota bool) {
	var drop func(string) bool
	if quota {
		drop = isQuotaHeader
	}
	err := g.client.Forward(w, r, drop)
	if err == nil {
		return
	}
	if cut := (*http1.CutShortError)(nil); errors.As(err, &cut) {
		// Abort the client's connection rather than end the answer as if
		// it were whole.
		if r.Context().Err() == nil {
			g.logFailure("gateway: copying the upstream's answer failed", "method", r.Method, "path", r.URL.Path, "err", cut.Err)
		}
		panic(http.ErrAbortHandler)
	}
	g.upstreamError(w, r, err)
}

// forwarding sets h to the forwarding headers of the call in (none when
// the peer's address is unknown). The
// incoming ones are dropped and set again:
//
//   - From a trusted proxy, X-Forwarded-For is its chain with the peer
//     appended, X-Forwarded-Proto and X-Forwarded-Host are kept when
//     present, and a Forwarded header is kept with an element for the peer
//     appended.
//   - From anyone else, X-Forwarded-For starts afresh with the peer, the
//     proto and host are the gateway's own view, and Forwarded is dropped:
//     what a client wrote there is not passed on as if a proxy had.
func (g *Gateway) forwarding(in *http.Request, h *http1.Forwarded) {
	peer, ok := http1.Peer(in, middleware.Peer)
	if !ok {
		return
	}
	h.Set = true
	proto := "http"
	if in.TLS != nil {
		proto = "https"
	}
	h.Vals[0], h.Vals[1] = proto, in.Host
	h.Proto, h.Host = h.Vals[0:1:1], h.Vals[1:2:2]
	h.For = addrText(in.RemoteAddr, peer)
	if g.id.TrustsAddr(peer) {
		peerText := h.For
		if prior := in.Header[middleware.HeaderXForwardedFor]; len(prior) > 0 {
			h.For = strings.Join(prior, ", ") + ", " + peerText
		}
		if p := in.Header["X-Forwarded-Proto"]; len(p) > 0 {
			h.Proto = p
		}
		if p := in.Header["X-Forwarded-Host"]; len(p) > 0 {
			h.Host = p
		}
		if prior := in.Header[middleware.HeaderForwarded]; len(prior) > 0 {
			h.Forwarded = strings.Join(prior, ", ") + ", " + forwardedElement(peerText, proto)
		}
	}
}

// rewrite builds the upstream request of the ReverseProxy path.
// ReverseProxy has already removed the hop-by-hop headers (Connection and
// what it names, Keep-Alive, Proxy-*, TE, Trailer, Transfer-Encoding,
// Upgrade — put back for an upgrade) and every forwarding header; they are
// set again here, as forwarding says.
func (g *Gateway) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(g.target)
	// One allocation for the values set here, each header its own
	// full-capacity slice of h.Vals.
	h := new(http1.Forwarded)
	g.forwarding(pr.In, h)
	if !h.Set {
		return
	}
	out := pr.Out.Header
	out["X-Forwarded-Proto"] = h.Proto
	out["X-Forwarded-Host"] = h.Host
	if h.Forwarded != "" {
		out[middleware.HeaderForwarded] = []string{h.Forwarded}
	}
	h.Vals[2] = h.For
	out[middleware.HeaderXForwardedFor] = h.Vals[2:3:3]
	// ReverseProxy sets an empty User-Agent when the call has none (so
	// that Go's is not sent), allocating for it; set here, h.Vals[3] is "".
	if _, ok := out["User-Agent"]; !ok {
		out["User-Agent"] = h.Vals[3:4:4]
	}
}

// addrText is peer as text, unmapped and without zone: for an IPv4 peer
// spelled plainly in remoteAddr ("203.0.113.7:5123"), the substring of it
// (netip spells IPv4 only one way, so it is the same text), without
// allocating.
func addrText(remoteAddr string, peer netip.Addr) string {
	if peer.Is4() && remoteAddr != "" && remoteAddr[0] != '[' {
		if i := strings.LastIndexByte(remoteAddr, ':'); i >= 0 {
			return remoteAddr[:i]
		}
		return remoteAddr
	}
	return peer.Unmap().WithZone("").String()
}

// forwardedElement is the RFC 7239 element for one hop: IPv6 addresses
// are quoted and bracketed.
func forwardedElement(addr, proto string) string {
	if strings.Contains(addr, ":") {
		return `for="[` + addr + `]";proto=` + proto
	}
	return "for=" + addr + ";proto=" + proto
}

// upstreamError answers a call the upstream failed: 408 when the failure
// was the client's, whose body arrived too slowly (listen.MinBodyRate);
// 504 when the upstream did not answer in time, else 502, each with a
// JSON error. Details go to the log, not to the client.
func (g *Gateway) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, listen.ErrSlowBody) || listen.BodyTooSlow(r) {
		// The client's fault, not the upstream's: say so, and close the
		// connection (the rest of the body is not worth waiting for).
		w.Header().Set("Connection", "close")
		jsonhttp.WriteError(w, http.StatusRequestTimeout, CodeSlowBody, "the request body arrived slower than the gateway's --min-body-rate allows")
		return
	}
	if r.Context().Err() != nil && errors.Is(err, context.Canceled) {
		// The client went away; nobody reads an answer.
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	status, code, msg := http.StatusBadGateway, CodeBadGateway, "the upstream could not be reached or failed"
	if isTimeout(err) {
		status, code, msg = http.StatusGatewayTimeout, CodeGatewayTimeout, "the upstream did not answer in time"
	}
	g.logFailure("gateway: upstream failed", "status", status, "method", r.Method, "path", r.URL.Path, "err", err)
	// The quota headers of the decision stay: the call was counted.
	jsonhttp.WriteError(w, status, code, msg)
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// limiterError answers a call the limiter could not decide (no rules
// loaded, a store error): 503. A shared store that is down is decided by
// each rule's failure_mode in store/failover, not here.
func (g *Gateway) limiterError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return // the client went away
	}
	g.logFailure("gateway: limiter could not decide", "err", err)
	jsonhttp.WriteError(w, http.StatusServiceUnavailable, CodeUnavailable, "the rate limiter could not decide")
}

// logFailure logs at most one failure a second, so that a failing
// upstream or store does not flood the log at the request rate.
func (g *Gateway) logFailure(msg string, args ...any) {
	g.failures.Warn(g.log, msg, args...)
}
