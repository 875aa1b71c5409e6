package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice/internal/listen"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/rls"
	"github.com/sluicehq/sluice/internal/rulestore"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
)

// observeFlags are the flags of the Envoy gRPC API and of observability.
type observeFlags struct {
	grpcListen string
	accessLog  bool
	// envoyHeaders: also answer envoyproxy/ratelimit's RateLimit-Limit,
	// RateLimit-Remaining and RateLimit-Reset.
	envoyHeaders bool
	// quotaHeaders: add sluice's quota headers and 429 body to the Envoy
	// API's answers.
	quotaHeaders bool
	// envoyCharge: --envoy-charge-after-response, the selectors of the
	// descriptors whose costs are charges after the response.
	envoyCharge []string
	// grpcTLS: the gRPC listener's own TLS (--grpc-tls-*); unset, it has
	// the data plane's (--tls-*).
	grpcTLS listen.TLSFiles
}

// addGRPCFlags registers serve's --grpc-listen on fl.
func addGRPCFlags(fl *pflag.FlagSet, f *observeFlags) {
	fl.StringVar(&f.grpcListen, "grpc-listen", ":8081", `Envoy rate limit service (gRPC) address; "" to turn it off`)
	fl.StringVar(&f.grpcTLS.Cert, "grpc-tls-cert", "", "PEM certificate chain: --grpc-listen with TLS of its own (needs --grpc-tls-key; default: --tls-cert's, if any)")
	fl.StringVar(&f.grpcTLS.Key, "grpc-tls-key", "", "PEM private key of --grpc-tls-cert")
	fl.StringVar(&f.grpcTLS.ClientCA, "grpc-tls-client-ca", "", "PEM CA certificate(s): with --grpc-tls-cert, gRPC clients need a certificate signed by one (mutual TLS)")
	fl.BoolVar(&f.envoyHeaders, "envoy-ratelimit-headers", false,
		"Envoy API: add envoyproxy/ratelimit's RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset headers (its LIMIT_RESPONSE_HEADERS_ENABLED)")
	fl.StringSliceVar(&f.envoyCharge, "envoy-charge-after-response", nil,
		"envoyproxy/ratelimit configuration: the descriptors whose calls with a hits_addend above 0 are charges after the response, taken in full into debt "+
			"(domain, domain:key or domain:key=value, comma-separated; docs/envoy.md)")
	fl.BoolVar(&f.quotaHeaders, "envoy-quota-headers", false,
		"Envoy API: add sluice's quota headers (X-RateLimit-*, RateLimit-Policy, RateLimit) to every answer, and Retry-After and the JSON body of the 429 to a denial")
}

// addAccessLogFlags registers --access-log on fl.
func addAccessLogFlags(fl *pflag.FlagSet, f *observeFlags) {
	fl.BoolVar(&f.accessLog, "access-log", false, "log one line per decision at level info (costly at high rates)")
}

// observer is what serve adds around the limiter: Prometheus metrics,
// the Envoy rate limit service on its own gRPC listener and the access
// log. (pprof is the admin API's: admin.Config.Pprof.)
type observer struct {
	f       observeFlags
	log     *slog.Logger
	metrics *metrics.Metrics
	store   limiter.Store // the counter store, instrumented: give it to the limiter
	rls     *rls.Server
	grpc    *grpc.Server
	ln      net.Listener
	opts    []grpc.ServerOption // TLS, token and limits of the gRPC listener (secure)
	tls     bool
	// healthy is the verdict of GET /healthcheck (set by serve).
	healthy func() bool
}

// newObserver instruments store and follows the rules of src. onDenied,
// when set, is told the Envoy API's denials (rls.Config.OnDenied).
func newObserver(f serveFlags, log *slog.Logger, src rulestore.Source, store limiter.Store,
	onDenied func(lim *limiter.Limiter, d *limiter.Decision, req *limiter.Request)) *observer {
	o := &observer{f: f.obs, log: log, metrics: metrics.New()}
	m := o.metrics
	o.store = m.Instrument(store)
	m.WatchRules(src.Status)
	cfg := rls.Config{Limiter: limiter.Config{IPv6Prefix: f.ipv6Prefix}, Metrics: m, Logger: log,
		EnvoyHeaders: o.f.envoyHeaders, QuotaHeaders: o.f.quotaHeaders,
		EnvoyLimitHeader: f.envoy.headers[0], EnvoyRemainingHeader: f.envoy.headers[1], EnvoyResetHeader: f.envoy.headers[2],
		NearLimitRatio: f.envoy.nearLimitRatio, OnDenied: onDenied}
	if o.f.accessLog {
		cfg.AccessLog = log
	}
	if d, ok := src.(interface {
		DetailedMetric(*rules.Index) map[string]bool
	}); ok { // envoyproxy/ratelimit's configuration: its detailed_metric
		cfg.DetailedMetric = d.DetailedMetric
	}
	o.rls = rls.New(o.store, cfg)
	o.setRules(src.Current())
	src.Subscribe(o.setRules)
	return o
}

func (o *observer) setRules(ix *rules.Index) {
	o.metrics.SetRules(ix)
	o.rls.SetRules(ix)
}

// data wraps the data plane: GET /metrics, and for POST /ratelimit/check
// the decision latency (api="http") and, with --access-log, one line per
// call.
func (o *observer) data(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", o.metrics.Handler())
	mux.HandleFunc("/healthcheck", o.healthcheck)
	mux.HandleFunc("/json", o.json)
	mux.Handle("/", h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/ratelimit/check" {
			mux.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		if !o.f.accessLog {
			h.ServeHTTP(w, r)
			o.metrics.Latency(metrics.APIHTTP, time.Since(start))
			return
		}
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		took := time.Since(start)
		o.metrics.Latency(metrics.APIHTTP, took)
		logAnswer(o.log, r, "decision", sw.status, w.Header(), took, slog.String("api", "http"))
	})
}

// healthcheck answers envoyproxy/ratelimit's probe as it does: 200 "OK"
// while healthy, else 500 with no body.
func (o *observer) healthcheck(w http.ResponseWriter, _ *http.Request) {
	if o.healthy != nil && !o.healthy() {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	w.Write([]byte("OK"))
}

// json is envoyproxy/ratelimit's /json: a RateLimitRequest in protobuf's
// JSON form, answered by the Envoy API as its RateLimitResponse in the
// same form, with 429 when it is OVER_LIMIT. A body that does not parse,
// or a request the service refuses, is 400, as there.
func (o *observer) json(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	var req rlsv3.RateLimitRequest
	if err == nil {
		err = protojson.Unmarshal(body, &req)
	}
	var resp *rlsv3.RateLimitResponse
	if err == nil {
		resp, err = o.rls.ShouldRateLimit(r.Context(), &req)
	}
	var b []byte
	if err == nil {
		b, err = protojson.Marshal(resp)
	}
	if err != nil {
		http.Error(w, http.StatusText(http.StatusBadRequest), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	w.Write(b)
}

// logAnswer writes the access-log line of one answered call: its status,
// quota headers (from h), peer and time taken, after the attrs that say
// which call it was.
func logAnswer(log *slog.Logger, r *http.Request, msg string, status int, h http.Header, took time.Duration, attrs ...slog.Attr) {
	log.LogAttrs(r.Context(), slog.LevelInfo, msg, append(attrs,
		slog.Int("status", status),
		slog.String("policy", h.Get("RateLimit-Policy")),
		slog.String("remaining", h.Get("X-RateLimit-Remaining")),
		slog.String("retry_after", h.Get("Retry-After")),
		slog.String("remote", r.RemoteAddr),
		slog.Duration("took", took))...)
}

// statusWriter remembers the status code written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the server's writer: the
// gateway's reverse proxy flushes streamed bodies and hijacks the
// connection of a WebSocket upgrade through it.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// secure sets the gRPC listener's limits, tokens and TLS: the data
// plane's (--tls-cert, --data-token), with "h2" as its protocol.
func (o *observer) secure(f listenFlags, tokens listen.Tokens) error {
	files, prefix := f.tls, "--tls"
	if o.f.grpcTLS != (listen.TLSFiles{}) {
		files, prefix = o.f.grpcTLS, "--grpc-tls"
	}
	t, err := listen.NewTLS(files, []string{"h2"}, prefix, o.log)
	if err != nil {
		return err
	}
	o.opts = listen.GRPCOptions(f.limits, tokens, t)
	o.tls = t != nil
	return nil
}

// listen opens the gRPC listener, unless --grpc-listen is "".
func (o *observer) listen() error {
	if o.f.grpcListen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", o.f.grpcListen)
	if err != nil {
		return fmt.Errorf("serve: Envoy rate limit service (gRPC): %w", err)
	}
	o.ln = ln
	return nil
}

// close closes the gRPC listener when serve gives up before serving.
func (o *observer) close() {
	if o.ln != nil {
		o.ln.Close()
	}
}

// serve serves the Envoy rate limit service and the gRPC health service on
// the listener; a failure goes to errc.
func (o *observer) serve(errc chan<- error) {
	if o.ln == nil {
		return
	}
	o.grpc = grpc.NewServer(append(rls.ServerOptions(), o.opts...)...)
	o.rls.Register(o.grpc)
	o.log.Info("listening", "what", "Envoy rate limit service (gRPC)", "addr", o.ln.Addr().String(), "tls", o.tls)
	go func() {
		if err := o.grpc.Serve(o.ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			errc <- fmt.Errorf("serve: Envoy rate limit service (gRPC): %w", err)
		}
	}()
}

// shutdown says NOT_SERVING on the health service and lets the calls in
// flight finish until ctx is done.
func (o *observer) shutdown(ctx context.Context) {
	if o.grpc == nil {
		return
	}
	o.rls.Shutdown()
	done := make(chan struct{})
	go func() {
		o.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		o.grpc.Stop()
	}
}
