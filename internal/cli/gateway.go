package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/console"
	"github.com/sluicehq/sluice/internal/gateway"
	"github.com/sluicehq/sluice/internal/http1"
	"github.com/sluicehq/sluice/internal/listen"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/rulestore"
	"github.com/sluicehq/sluice/internal/seam/mwhook"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/middleware"
)

// gatewayFlags are the flags of `sluice gateway` (docs/gateway.md): serve's rules,
// store and logging flags, plus the upstream and identity.
type gatewayFlags struct {
	engine      serveFlags // the shared flags (see addEngineFlags)
	listen      string
	adminListen string
	adminToken  string
	adminGuard  adminGuardFlags // --admin-allowed-host, --admin-allowed-origin, --pprof (adminflags.go)

	upstream        string
	dialTimeout     time.Duration
	responseTimeout time.Duration
	minBodyRate     int64         // --min-body-rate, bytes/s
	bodyRateGrace   time.Duration // --body-rate-grace
	shapeMaxWait    time.Duration // --shape-max-wait: 0 rejects at once
	httpEngine      string        // --http-engine: gateway.EngineFast or gateway.EngineStd

	jwtSecret     string
	jwtKeys       string
	jwtPlanClaim  string
	jwtIssuer     string
	jwtAudience   string
	apiKeyHeader  string
	trusted       string
	forwardedFrom string
}

func newGatewayCmd() *cobra.Command {
	f := gatewayFlags{}
	cmd := &cobra.Command{
		Use:   "gateway --upstream URL",
		Short: "Run a rate-limiting reverse proxy in front of an upstream",
		Long: `Run a reverse proxy whose first step is the rate limiter.

Every call is identified (the user of a verified JWT, a registered API key,
the client address) and checked against the rules before anything else: a
denied call is answered 429 from its headers alone, before its body is read,
and never reaches the upstream. Allowed calls are proxied with the quota
headers added to the upstream's answer.

The rules and store flags are those of sluice serve. The admin API runs only
when --admin-listen is given; /healthz and /readyz are served there too (the
proxy port forwards every path). Every flag also reads SLUICE_<FLAG>, e.g.
SLUICE_JWT_HS256_SECRET.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runGateway(ctx, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", ":8000", "proxy HTTP address")
	fl.StringVar(&f.upstream, "upstream", "", "URL calls are proxied to, e.g. http://127.0.0.1:3000 (required)")
	fl.DurationVar(&f.dialTimeout, "upstream-dial-timeout", 5*time.Second, "how long connecting to the upstream may take (then 504)")
	fl.DurationVar(&f.responseTimeout, "upstream-timeout", 30*time.Second, "how long the upstream may take to send its response headers (then 504); bodies stream without limit")
	fl.Int64Var(&f.minBodyRate, "min-body-rate", 1024, "bytes a second a request body must arrive at, on average, once --body-rate-grace has passed (then 408 and the connection is closed)")
	fl.DurationVar(&f.bodyRateGrace, "body-rate-grace", 10*time.Second, "how long a request body may take before --min-body-rate applies")
	fl.StringVar(&f.httpEngine, "http-engine", gateway.EngineFast, "HTTP/1.1 engine of the proxy port and the upstream calls: fast (the gateway's own server loop and client for plain calls, net/http for the rest) or std (net/http and httputil.ReverseProxy for every call)")
	fl.DurationVar(&f.shapeMaxWait, "shape-max-wait", 0, "shaping mode, for egress: hold each call until its reserved slot, up to this long, and answer 429 at once beyond it (0: off, calls are rejected at once; at most 1h; every matching rule must be a token_bucket or leaky_bucket)")
	fl.StringVar(&f.adminListen, "admin-listen", "", "admin API address (and /healthz, /readyz); empty: no admin API; a non-loopback address requires --admin-token")
	addAdminGuardFlags(fl, &f.adminGuard)
	fl.StringVar(&f.adminToken, "admin-token", "", "bearer token(s) the admin API requires, comma-separated; \"name:secret\" records changes as name's (empty: none, loopback only)")
	fl.StringVar(&f.jwtSecret, "jwt-hs256-secret", "", "HS256 secret of trusted bearer tokens (prefer SLUICE_JWT_HS256_SECRET)")
	fl.StringVar(&f.jwtKeys, "jwt-public-keys", "", "file of RS256/ES256 public keys of trusted bearer tokens: PEM or JWKS")
	fl.StringVar(&f.jwtPlanClaim, "jwt-plan-claim", middleware.DefaultPlanClaim, "token claim holding the caller's plan")
	fl.StringVar(&f.jwtIssuer, "jwt-issuer", "", "when set, the iss a token must carry")
	fl.StringVar(&f.jwtAudience, "jwt-audience", "", "when set, an aud a token must carry")
	fl.StringVar(&f.apiKeyHeader, "api-key-header", middleware.DefaultAPIKeyHeader, "header API keys are read from (only keys registered as api_key:<key> are trusted)")
	fl.StringVar(&f.trusted, "trusted-proxies", "", "comma-separated CIDRs of proxies whose forwarding header names the client (default: none, the peer is the client)")
	fl.StringVar(&f.forwardedFrom, "forwarded-header", middleware.HeaderXForwardedFor, "header trusted proxies name the client in: X-Forwarded-For or Forwarded")
	addEngineFlags(fl, &f.engine)
	return cmd
}

// identifier builds the gateway's Identifier from the flags.
func (f *gatewayFlags) identifier() (*middleware.Identifier, error) {
	id := &middleware.Identifier{APIKeyHeader: f.apiKeyHeader}
	switch h := http.CanonicalHeaderKey(f.forwardedFrom); h {
	case middleware.HeaderXForwardedFor, middleware.HeaderForwarded:
		id.ForwardedHeader = h
	default:
		return nil, fmt.Errorf("gateway: --forwarded-header %q: want X-Forwarded-For or Forwarded", f.forwardedFrom)
	}
	if strings.TrimSpace(f.apiKeyHeader) == "" || strings.ContainsAny(f.apiKeyHeader, " :\t") {
		return nil, fmt.Errorf("gateway: --api-key-header %q is not a header name", f.apiKeyHeader)
	}
	var err error
	if id.TrustedProxies, err = middleware.ParseTrustedProxies(f.trusted); err != nil {
		return nil, fmt.Errorf("gateway: --trusted-proxies: %w", err)
	}
	if f.jwtSecret == "" && f.jwtKeys == "" {
		return id, nil
	}
	cfg := middleware.JWTConfig{HS256Secret: []byte(f.jwtSecret), PlanClaim: f.jwtPlanClaim,
		Issuer: f.jwtIssuer, Audience: f.jwtAudience}
	if f.jwtKeys != "" {
		if cfg.Keys, err = middleware.LoadPublicKeys(f.jwtKeys); err != nil {
			return nil, fmt.Errorf("gateway: --jwt-public-keys: %w", err)
		}
	}
	if id.JWT, err = middleware.NewJWTVerifier(cfg); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	return id, nil
}

func runGateway(ctx context.Context, f gatewayFlags) error {
	target, id, err := f.validate()
	if err != nil {
		return err
	}
	// With an admin API, the operator console: the store timed and every
	// decision counted in metrics, the denials fed to the top list.
	var con *gatewayConsole
	var instrument func(*slog.Logger, rulestore.Source, limiter.Store) limiter.Store
	if f.adminListen != "" {
		con = &gatewayConsole{}
		instrument = con.instrument(f.engine.ipv6Prefix)
	}
	eng, err := openEngine(ctx, f.engine, instrument)
	if err != nil {
		return err
	}
	defer eng.Close()
	log := eng.log

	gw, err := f.proxy(eng, target, id, con)
	if err != nil {
		return err
	}
	defer gw.Close()
	if con != nil {
		con.run(ctx)
	}
	srv, err := f.servers(eng, gw, con)
	if err != nil {
		return err
	}
	specs := make([]listenSpec, len(srv.servers))
	for i, s := range srv.servers {
		flag := "listen"
		if i == 1 {
			flag = "admin-listen"
		}
		specs[i] = listenSpec{flag: flag, what: srv.names[i], addr: s.Addr, open: func() (net.Listener, error) { return listenOn(s.Addr, srv.tlss[i]) }}
	}
	listeners, err := listenAll("gateway", specs)
	if err != nil {
		return err
	}

	started := func(chan<- error) {
		log.Info("sluice gateway serving", "upstream", target.Redacted(), "rules", eng.src.Status().Location,
			"revision", eng.src.Current().Revision(), "store", eng.storeInfo()["kind"],
			"jwt", id.JWT != nil, "trusted_proxies", len(id.TrustedProxies))
	}
	return srv.run(ctx, eng.src, listeners, f.engine.shutdown, started, nil)
}

// validate checks the flags that need no engine, in the order a user
// reads them, and returns the upstream URL and the identifier.
func (f *gatewayFlags) validate() (*url.URL, *middleware.Identifier, error) {
	if f.upstream == "" {
		return nil, nil, errors.New("gateway: --upstream is required (the URL calls are proxied to)")
	}
	target, err := url.Parse(f.upstream)
	if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
		example := "http://" + strings.TrimPrefix(f.upstream, "//")
		if _, rest, ok := strings.Cut(f.upstream, "://"); ok {
			example = "http://" + rest
		}
		return nil, nil, fmt.Errorf("gateway: --upstream %q: want an http:// or https:// URL with a host, e.g. %s", f.upstream, example)
	}
	if err := f.engine.checkSecrets(); err != nil {
		return nil, nil, err
	}
	if err := checkSecret("jwt-hs256-secret", f.jwtSecret); err != nil {
		return nil, nil, err
	}
	id, err := f.identifier()
	if err != nil {
		return nil, nil, err
	}
	if f.adminListen != "" {
		if err := f.adminGuard.checkAdmin(f.adminListen, f.adminToken); err != nil {
			return nil, nil, err
		}
	} else if err := admin.ParseTokens(f.adminToken).Err(); err != nil {
		return nil, nil, fmt.Errorf("gateway: --admin-token (SLUICE_ADMIN_TOKEN): %w", err) // unused without --admin-listen, but wrong
	}
	if err := f.engine.net.validate(); err != nil {
		return nil, nil, err
	}
	if f.minBodyRate < 1 {
		return nil, nil, fmt.Errorf("gateway: --min-body-rate must be at least 1 (bytes a second), got %d", f.minBodyRate)
	}
	if f.adminListen == "" && f.engine.net.adminTLS.Enabled() {
		return nil, nil, errors.New("gateway: --admin-tls-cert, --admin-tls-key and --admin-tls-client-ca need --admin-listen, the admin API they would serve")
	}
	if f.httpEngine != gateway.EngineFast && f.httpEngine != gateway.EngineStd {
		return nil, nil, fmt.Errorf("gateway: --http-engine (SLUICE_HTTP_ENGINE) %q: want %s or %s", f.httpEngine, gateway.EngineFast, gateway.EngineStd)
	}
	if f.shapeMaxWait < 0 || f.shapeMaxWait > limiter.MaxWait {
		return nil, nil, fmt.Errorf("gateway: --shape-max-wait must be from 0 (off) to 1h, got %s", f.shapeMaxWait)
	}
	if f.bodyRateGrace < time.Millisecond {
		return nil, nil, fmt.Errorf("gateway: --body-rate-grace must be at least 1ms, got %s", f.bodyRateGrace)
	}
	return target, id, nil
}

// gatewayConsole is what the gateway's operator console reads: the
// metrics of its decisions and store, and the top list of its denials.
type gatewayConsole struct {
	metrics *metrics.Metrics
	hitters *console.Hitters
	feed    *console.Feed
	sampler *console.Sampler
}

// instrument returns openEngine's instrument: the store timed, the
// metrics and the top list following the rules.
func (c *gatewayConsole) instrument(ipv6Prefix int) func(*slog.Logger, rulestore.Source, limiter.Store) limiter.Store {
	return func(_ *slog.Logger, src rulestore.Source, store limiter.Store) limiter.Store {
		c.metrics = metrics.New()
		c.metrics.WatchRules(src.Status)
		c.metrics.SetRules(src.Current())
		src.Subscribe(c.metrics.SetRules)
		c.hitters = console.NewHitters(0, nil)
		c.feed = console.NewFeed(c.hitters, limiter.Config{IPv6Prefix: ipv6Prefix})
		c.sampler = console.NewSampler(c.metrics.ConsoleGatherer())
		return c.metrics.Instrument(store)
	}
}

func (c *gatewayConsole) run(ctx context.Context) {
	go c.sampler.Run(ctx, time.Second)
	go c.hitters.Run(ctx)
}

// proxy builds the reverse proxy over the engine's limiter; con, when
// set, is told its decisions.
func (f *gatewayFlags) proxy(eng *engine, target *url.URL, id *middleware.Identifier, con *gatewayConsole) (*gateway.Gateway, error) {
	var mwOpts []middleware.Option
	if f.shapeMaxWait > 0 {
		mwOpts = append(mwOpts, middleware.WithShaping(f.shapeMaxWait))
	}
	if con != nil {
		mwOpts = append(mwOpts, mwhook.Observe(console.Observe(con.metrics, con.feed, eng.lim)).(middleware.Option))
	}
	return gateway.New(eng.lim, gateway.Config{
		Upstream:        target,
		DialTimeout:     f.dialTimeout,
		ResponseTimeout: f.responseTimeout,
		Identifier:      id,
		Middleware:      mwOpts,
		Logger:          eng.log,
		Engine:          f.httpEngine,
	})
}

// servers builds the servers: the proxy, and with --admin-listen the admin
// API with /healthz, /readyz and the console (con).
func (f *gatewayFlags) servers(eng *engine, gw *gateway.Gateway, con *gatewayConsole) (*serving, error) {
	log := eng.log
	var handler http.Handler = gw
	if f.engine.obs.accessLog {
		handler = accessLog(log, gw)
	}
	handler = listen.MinBodyRate(handler, f.minBodyRate, f.bodyRateGrace)
	proxyTLS, err := httpTLS(f.engine.net.tls, "--tls", log)
	if err != nil {
		return nil, err
	}
	srv := &serving{cmd: "gateway", log: log}
	// No body deadline, no response deadline: bodies stream both ways
	// for as long as they take, at --min-body-rate at least.
	proxy := f.engine.net.server(f.listen, handler, true, log)
	srv.add("gateway", proxy, proxyTLS)
	if proxyTLS == nil && f.httpEngine == gateway.EngineFast {
		// Plain HTTP: the gateway's own server loop serves the plain
		// calls and hands every other connection to net/http's.
		srv.loops[len(srv.loops)-1] = &http1.Server{Handler: handler, Fallback: proxy, ErrorLog: log}
	}
	if f.adminListen == "" {
		return srv, nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintln(w, `{"status":"ok"}`)
	})
	mux.Handle("GET /readyz", server.ReadyHandler(eng.ready)) // as serve's: one line, 503 when not ready
	acfg := f.adminGuard.config(f.adminListen, f.adminToken, log)
	if con != nil {
		acfg.Console = &admin.Console{Limiter: eng.lim, Sampler: con.sampler, Hitters: con.hitters,
			Store: eng.storeInfo, Instance: f.adminListen}
	}
	mux.Handle("/", admin.New(eng.src, acfg))
	adminTLS, err := httpTLS(f.engine.net.adminTLS, "--admin-tls", log)
	if err != nil {
		return nil, err
	}
	srv.add("admin API", f.engine.net.server(f.adminListen, admin.Guard(acfg, mux), false, log), adminTLS)
	return srv, nil
}

// accessLog wraps the gateway with --access-log: one line per call at
// level info, once its answer has been written (denied or proxied): the
// method, path, status, the quota headers, the peer and the time taken.
func accessLog(log *slog.Logger, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		logAnswer(log, r, "request", sw.status, w.Header(), time.Since(start),
			slog.String("method", r.Method), slog.String("path", r.URL.Path))
	})
}
