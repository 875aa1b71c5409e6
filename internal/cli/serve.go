package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/console"
	"github.com/sluicehq/sluice/internal/listen"
	"github.com/sluicehq/sluice/internal/rulestore"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/limiter"
)

// serveFlags are the flags of `sluice serve` (docs/guide.md, "Commands").
type serveFlags struct {
	listen        string
	adminListen   string
	adminToken    string
	adminGuard    adminGuardFlags // --admin-allowed-host, --admin-allowed-origin, --pprof (adminflags.go)
	rules         string
	rulesPoll     time.Duration
	rulesStore    rulesStoreFlags // --rules-snapshot, --rules-refresh, --rules-notify (rulesource.go)
	redis         string
	redisUser     string
	redisPass     string
	redisTLS      bool
	redisTLSCA    string
	redisWait     time.Duration
	storeTimeout  time.Duration
	probeTimeout  time.Duration
	probeInterval time.Duration
	memoryMax     int // --memory-max-buckets
	instances     int
	ipv6Prefix    int
	logLevel      string
	logFormat     string
	gcFloorMiB    int
	shutdown      time.Duration
	obs           observeFlags // --grpc-listen, --access-log (observe.go)
	net           listenFlags  // TLS, timeouts and header limits (listen.go)
	dataToken     string
	jsonDecoder   string        // --json-decoder: server.DecoderFast or server.DecoderStd
	envoy         envoySettings // envoyproxy/ratelimit's environment with no flag of its own (env.go)
}

func newServeCmd() *cobra.Command {
	f := serveFlags{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the decision service (POST /ratelimit/check) and the admin API",
		Long: `Run the decision service.

With no flags, sluice serve starts on the embedded default: in-memory
counters and rules in ./sluice-rules.yaml (created with a commented example
if missing). Every flag also reads SLUICE_<FLAG>, e.g. SLUICE_ADMIN_TOKEN.

It also reads the environment of an envoyproxy/ratelimit deployment
(RUNTIME_ROOT, RUNTIME_SUBDIRECTORY, REDIS_URL, PORT, GRPC_PORT, ...), so
that sluice's image replaces that service's with the same settings: its
runtime directory's configuration is served as it is and followed as it
changes, and a setting sluice cannot honour stops it at start, named
(docs/envoy.md, "Environment"). Flags and SLUICE_ variables win.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := readEnvoyEnv(cmd.Flags(), &f, os.LookupEnv); err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runServe(ctx, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", ":8080", "data-plane HTTP address (POST /ratelimit/check, /healthz, /readyz)")
	addGRPCFlags(fl, &f.obs)
	fl.StringVar(&f.adminListen, "admin-listen", "127.0.0.1:9090", "admin API address; a non-loopback address requires --admin-token")
	addAdminGuardFlags(fl, &f.adminGuard)
	fl.StringVar(&f.adminToken, "admin-token", "", "bearer token(s) the admin API requires, comma-separated; \"name:secret\" records changes as name's (empty: none, loopback only)")
	fl.StringVar(&f.dataToken, "data-token", "", "bearer token(s) the decision API (--listen) and the Envoy API (--grpc-listen) require, comma-separated (empty: none; /healthz, /readyz and gRPC health stay open)")
	fl.StringVar(&f.jsonDecoder, "json-decoder", server.DecoderFast, "reader of the check and reserve APIs' JSON bodies: fast (sluice's own tokenizer) or std (encoding/json, the fallback should the tokenizer be in doubt)")
	addEngineFlags(fl, &f)
	return cmd
}

func runServe(ctx context.Context, f serveFlags) error {
	if err := f.adminGuard.checkAdmin(f.adminListen, f.adminToken); err != nil {
		return err
	}
	if err := f.checkSecrets(); err != nil {
		return err
	}
	dataTokens, err := listen.ParseTokens("--data-token", f.dataToken)
	if err != nil {
		return err
	}
	if err := f.net.validate(); err != nil {
		return err
	}
	if f.jsonDecoder != server.DecoderFast && f.jsonDecoder != server.DecoderStd {
		return fmt.Errorf("serve: --json-decoder (SLUICE_JSON_DECODER) %q: want %s or %s", f.jsonDecoder, server.DecoderFast, server.DecoderStd)
	}
	// The operator console's top list: the callers denied most, fed on
	// the denial path only, by the check API and the Envoy API alike.
	hitters := console.NewHitters(0, nil)
	var feed *console.Feed
	var obs *observer
	eng, err := openEngine(ctx, f, func(log *slog.Logger, src rulestore.Source, store limiter.Store) limiter.Store {
		feed = console.NewFeed(hitters, limiter.Config{IPv6Prefix: f.ipv6Prefix})
		obs = newObserver(f, log, src, store, feed.Denied)
		return obs.store
	})
	if err != nil {
		return err
	}
	defer eng.Close()
	log, src, lim, storeInfo := eng.log, eng.src, eng.lim, eng.storeInfo

	// The operator console: the top list above and the rates read from
	// the metrics once a second.
	sampler := console.NewSampler(obs.metrics.ConsoleGatherer())
	go sampler.Run(ctx, time.Second)
	go hitters.Run(ctx)
	data := server.New(lim, server.Config{
		Logger:      log,
		Ready:       eng.ready,
		OnDecision:  obs.metrics.Decision,
		OnError:     obs.metrics.HTTPError,
		OnDenied:    feed.Denied,
		JSONDecoder: f.jsonDecoder,
	})
	acfg := f.adminGuard.config(f.adminListen, f.adminToken, log)
	acfg.Console = &admin.Console{Limiter: lim, Sampler: sampler, Hitters: hitters, Envoy: obs.rls, Store: storeInfo, Instance: f.adminListen}
	adm := admin.New(src, acfg)

	dataTLS, err := httpTLS(f.net.tls, "--tls", log)
	if err != nil {
		return err
	}
	adminTLS, err := httpTLS(f.net.adminTLS, "--admin-tls", log)
	if err != nil {
		return err
	}
	if err := obs.secure(f.net, dataTokens); err != nil {
		return err
	}
	obs.healthy = func() bool {
		switch {
		case ctx.Err() != nil: // shutting down
			return false
		case f.envoy.healthConfig && len(src.Current().Domains()) == 0:
			return false
		case f.envoy.healthRedis && storeInfo()["state"] != "ok":
			return false
		}
		return true
	}
	srv := serving{cmd: "serve", log: log}
	srv.add("data plane", f.net.server(f.listen, dataTokens.HTTP(obs.data(data), "/healthz", "/readyz", "/healthcheck"), false, log), dataTLS)
	srv.add("admin API", f.net.server(f.adminListen, adm, false, log), adminTLS)
	specs := []listenSpec{
		{flag: "listen", what: srv.names[0], addr: f.listen, open: func() (net.Listener, error) { return listenOn(f.listen, dataTLS) }},
		{flag: "admin-listen", what: srv.names[1], addr: f.adminListen, open: func() (net.Listener, error) { return listenOn(f.adminListen, adminTLS) }},
	}
	if a := f.envoy.metricsAddr; a != "" {
		mux := http.NewServeMux()
		mux.Handle("GET "+f.envoy.metricsPath, obs.metrics.Handler())
		srv.add("metrics (PROMETHEUS_ADDR)", f.net.server(a, mux, false, log), nil)
		specs = append(specs, listenSpec{flag: "PROMETHEUS_ADDR", what: srv.names[2], addr: a, open: func() (net.Listener, error) { return listenOn(a, nil) }})
	}
	if f.obs.grpcListen != "" {
		specs = append(specs, listenSpec{flag: "grpc-listen", what: "Envoy rate limit service (gRPC)", addr: f.obs.grpcListen,
			open: func() (net.Listener, error) { err := obs.listen(); return obs.ln, err }})
	}
	listeners, err := listenAll("serve", specs)
	if err != nil {
		return err
	}
	defer obs.close()

	started := func(errc chan<- error) {
		obs.serve(errc)
		log.Info("sluice serving", "rules", src.Status().Location, "revision", src.Current().Revision(), "store", storeInfo()["kind"])
	}
	return srv.run(ctx, src, listeners, f.shutdown, started, obs.shutdown)
}

func newLogger(level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("serve: --log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("serve: --log-format %q: want text or json", format)
}
