// Package rls is sluice's Envoy rate limit service: the gRPC API
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit that Envoy's
// ratelimit filter calls, plus the standard gRPC health service. It decides
// with the same limiter, rules and store as POST /ratelimit/check, so a
// caller has one limit whichever way it is asked.
//
// The model: each descriptor of a request is one sluice check (its entries
// are the check's fields, hits_addend its cost, the request's domain picks
// the rules); the descriptors of one request are decided all or nothing,
// united into one check when they agree and taken in one atomic operation
// when they do not (limiter.CheckMany); an API key nobody registered is
// no caller, as in the gateway; a descriptor without entries is OK and
// counts nothing. The answer has one status per descriptor and, by
// default, no header and no body, as envoyproxy/ratelimit's (Config says
// which headers to add). A request Envoy's configuration got wrong is
// codes.InvalidArgument naming the field, a store that cannot decide
// codes.Unavailable; no value a caller controls ends in an error Envoy
// could turn into "allow".
//
// The mapping, the answer and every case in full: docs/envoy.md.
package rls

import (
	"context"
	"log/slog"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/identity"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/ratelog"
	"github.com/sluicehq/sluice/internal/rulekey"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
)

// ServiceName is the gRPC service sluice serves, as the health service
// knows it.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// Config configures a Server. Zero fields take their defaults.
type Config struct {
	// Limiter configures the limiters the server decides with; it must be
	// the data plane's, so that both key callers alike.
	Limiter limiter.Config
	// Metrics, when set, counts every decision and times every request.
	Metrics *metrics.Metrics
	// AccessLog, when set, gets one line per request at level Info: domain,
	// code, the deciding rule, client, remaining, retry and latency. Off by
	// default: at tens of thousands of decisions a second it costs more
	// than the decision.
	AccessLog *slog.Logger
	// Logger gets the errors the store returns, at most one line a second.
	// Default: discard.
	Logger *slog.Logger
	// QuotaHeaders adds sluice's quota headers to every answer
	// (X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset,
	// RateLimit-Policy, RateLimit; see addHeaders) and, to a denial,
	// Retry-After, Content-Type and the JSON body of the 429 as raw_body.
	// Default off: the answer then carries what envoyproxy/ratelimit's
	// would with the same settings, so that replacing it changes no
	// response Envoy sends.
	QuotaHeaders bool
	// DetailedMetric, when set, returns the ids of the rules of a rule
	// set whose descriptor has envoyproxy/ratelimit's detailed_metric
	// (rulestore's envoyproxy/ratelimit sources): with Metrics, their hits
	// count per descriptor value, for at most metrics.MaxDetailedValues
	// values a rule, the rest under the rule's key.
	DetailedMetric func(*rules.Index) map[string]bool
	// EnvoyHeaders adds envoyproxy/ratelimit's response headers (its
	// LIMIT_RESPONSE_HEADERS_ENABLED): the limit, remaining and reset of
	// the descriptor it picks (see addEnvoyHeaders), after sluice's own
	// when QuotaHeaders is set too. Default off, as in envoyproxy/ratelimit.
	EnvoyHeaders bool
	// EnvoyLimitHeader, EnvoyRemainingHeader and EnvoyResetHeader name
	// those headers (its LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER and
	// LIMIT_RESET_HEADER). Default RateLimit-Limit, RateLimit-Remaining
	// and RateLimit-Reset, its defaults.
	EnvoyLimitHeader, EnvoyRemainingHeader, EnvoyResetHeader string
	// NearLimitRatio is the share of a limit past which allowed hits count
	// as near the limit in the statistics (envoyproxy/ratelimit's
	// NEAR_LIMIT_RATIO). Default 0.8.
	NearLimitRatio float64

	// OnDenied, when set, is told every decision a rule denies (one per
	// descriptor decided on its own, one for descriptors united into one
	// check), with the limiter that decided it (the request's domain's) and
	// the call, as the check API's
	// server.Config.OnDenied (the console's top list,
	// console.Feed.Denied); never a denial without a rule (too many
	// rules). It runs on the request's goroutine: it must be cheap and
	// must keep neither argument. An allowed decision never reaches it.
	OnDenied func(lim *limiter.Limiter, d *limiter.Decision, req *limiter.Request)
}

// Server implements RateLimitService over a counter store. Rules are put
// in force with SetRules. Safe for concurrent use; use New.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer

	store  limiter.Store
	cfg    Config
	health *health.Server

	views atomic.Pointer[views]
	mu    sync.Mutex                  // serializes SetRules
	lims  map[string]*limiter.Limiter // by domain ("": the rules with no domain), kept across rule sets

	failures ratelog.Limiter // limiter errors: one line a second
	tooMany  ratelog.Limiter // descriptors denied for too many rules: one line a second
}

// views are the limiters of one rule set: one per domain some rule names,
// and one for the rules with no domain.
type views struct {
	root   *limiter.Limiter
	by     map[string]*limiter.Limiter
	limits []*rlsv3.RateLimitResponse_RateLimit // CurrentLimit of each rule, by Seq
	stats  []*metrics.EnvoyStats                // statistics of each limited rule, by Seq (nil without Config.Metrics)
	detail []*metrics.EnvoyDetail               // per-value statistics of each rule with detailed_metric, by Seq
	ix     *rules.Index
	// entries: some enabled rule matches on descriptor entries or is keyed
	// by one, so each descriptor is decided with its own entries, never
	// merged with the others'.
	entries bool
	// quota: the limiters of the domains with quota rules (quota.go), nil
	// when there are none.
	quota *quotaViews
}

// New returns a server deciding over store. Until SetRules it answers
// codes.Unavailable.
func New(store limiter.Store, cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.NearLimitRatio <= 0 || cfg.NearLimitRatio > 1 {
		cfg.NearLimitRatio = 0.8
	}
	for _, h := range [...]struct {
		name *string
		def  string
	}{
		{&cfg.EnvoyLimitHeader, EnvoyLimitHeader},
		{&cfg.EnvoyRemainingHeader, EnvoyRemainingHeader},
		{&cfg.EnvoyResetHeader, EnvoyResetHeader},
	} {
		if *h.name == "" {
			*h.name = h.def
		}
	}
	s := &Server{store: store, cfg: cfg, health: health.NewServer()}
	s.health.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
	return s
}

// SetRules puts ix in force for the requests that start after it returns:
// each domain's limiter, the one of the rules with no domain included,
// gets its view of ix (limiter.SetRules). A domain that no rule names any
// more loses its limiter; its requests go to the rules with no domain.
func (s *Server) SetRules(ix *rules.Index) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lims == nil {
		s.lims = make(map[string]*limiter.Limiter)
	}
	lim := func(d string, v *rules.Index) *limiter.Limiter {
		l := s.lims[d]
		if l == nil {
			l = limiter.New(s.store, s.cfg.Limiter)
			s.lims[d] = l
		}
		l.SetRules(v)
		return l
	}
	vs := &views{ix: ix, by: make(map[string]*limiter.Limiter)}
	vs.root = lim("", ix)
	for _, d := range ix.Domains() {
		vs.by[d] = lim(d, ix.Domain(d))
	}
	for d := range s.lims {
		if d != "" && vs.by[d] == nil {
			delete(s.lims, d)
		}
	}
	rs := ix.Rules()
	vs.limits = make([]*rlsv3.RateLimitResponse_RateLimit, len(rs))
	if m := s.cfg.Metrics; m != nil {
		var detailed map[string]bool
		if s.cfg.DetailedMetric != nil {
			detailed = s.cfg.DetailedMetric(ix)
		}
		vs.stats, vs.detail = make([]*metrics.EnvoyStats, len(rs)), make([]*metrics.EnvoyDetail, len(rs))
		keys, details := make(map[[2]string]bool), make(map[[2]string]bool)
		for i, r := range rs {
			if r.IsEnabled() && !r.Unlimited {
				k := [2]string{r.Match.Domain, DescriptorKey(r)}
				keys[k] = true
				vs.stats[i] = m.EnvoyStats(k[0], k[1])
				if detailed[r.ID] && len(r.Match.Entries) > 0 {
					details[k] = true
					vs.detail[i] = m.EnvoyDetail(k[0], k[1])
				}
			}
		}
		m.SetEnvoyKeys(keys, details)
	}
	for i, r := range rs {
		vs.limits[i] = CurrentLimit(r)
		if !r.IsEnabled() {
			continue
		}
		vs.entries = vs.entries || len(r.Match.Entries) > 0
		for _, p := range r.Key {
			vs.entries = vs.entries || p.Kind == rulekey.Entry
		}
	}
	vs.quota = s.newQuotaViews(ix)
	s.views.Store(vs)
}

// prepare readies the calls parse read from req for the limiter it
// returns, req's domain's: an unregistered API key dropped, and each
// descriptor's own limit.
func (vs *views) prepare(req *rlsv3.RateLimitRequest, calls []call) *limiter.Limiter {
	for i := range calls {
		// An API key nobody registered is no caller, as in the gateway:
		// the call is keyed by its other identities, so that inventing
		// keys cannot buy fresh buckets.
		if k := &calls[i].req.APIKey; *k != "" && !vs.ix.RegisteredAPIKey(*k) {
			*k = ""
		}
	}
	if vs.by[req.GetDomain()] != nil { // a domain no rule names has no limits, as in envoyproxy/ratelimit
		for i, d := range req.GetDescriptors() {
			if d.GetLimit() != nil && !calls[i].empty {
				calls[i].desc.Own, calls[i].desc.OwnBucket = ownLimit(req.GetDomain(), d)
			}
		}
	}
	return vs.limiter(req.GetDomain())
}

// limiter returns the limiter of domain.
func (vs *views) limiter(domain string) *limiter.Limiter {
	if l := vs.by[domain]; l != nil {
		return l
	}
	return vs.root
}

// count adds a decision of cost to the statistics of its rule, as
// envoyproxy/ratelimit counts a descriptor's hits: all of them in total;
// those of a denial (a shadow rule's that would have denied included)
// over the limit, and also shadow mode for a shadow rule; those of an
// allowed call within the limit, and those of them past NearLimitRatio
// of the limit also near it. A denied call takes nothing, so all its hits
// are over the limit. Nothing for a decision without a rule or by a
// descriptor's own limit. A rule with detailed_metric counts on the series
// of the descriptor's values, es, while it has one (see
// Config.DetailedMetric).
func (s *Server) count(vs *views, d *limiter.Decision, cost int64, es []rules.Entry) {
	if vs.stats == nil || d.Rule == nil || d.Rule.Seq >= len(vs.stats) || vs.ix.Rules()[d.Rule.Seq] != d.Rule {
		return
	}
	st := vs.stats[d.Rule.Seq]
	if st == nil {
		return
	}
	if det := vs.detail[d.Rule.Seq]; det != nil && len(es) > 0 {
		if dst := det.Stats(entriesKey(es)); dst != nil {
			st = dst
		}
	}
	c := float64(cost)
	st.Total.Add(c)
	if !d.Allowed || d.ShadowDenied == d.Rule.ID {
		st.Over.Add(c)
		if d.Rule.Shadow {
			st.Shadow.Add(c)
		}
		return
	}
	st.Within.Add(c)
	// The count after the call and before it, as a fixed window's.
	after := d.Limit - max(d.Remaining, 0)
	before := after - cost
	// In float32, as envoyproxy/ratelimit computes it.
	near := int64(math.Floor(float64(float32(d.Limit) * float32(s.cfg.NearLimitRatio))))
	if after > near {
		st.Near.Add(float64(after - max(near, before)))
	}
}

// limit returns the cached CurrentLimit of r, nil when r is not of this
// rule set.
func (vs *views) limit(r *rules.Compiled) *rlsv3.RateLimitResponse_RateLimit {
	if r == nil || r.Seq >= len(vs.limits) || vs.ix.Rules()[r.Seq] != r {
		return nil
	}
	return vs.limits[r.Seq]
}

// Register registers the rate limit service and the gRPC health service
// (grpc.health.v1.Health, SERVING for "" and ServiceName) on g.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	rlsv3.RegisterRateLimitServiceServer(g, s)
	healthpb.RegisterHealthServer(g, s.health)
}

// Shutdown makes the health service answer NOT_SERVING, so that clients
// that watch it drain before the server stops.
func (s *Server) Shutdown() { s.health.Shutdown() }

// MaxRequestBytes bounds one ShouldRateLimit request: eight times the
// largest request header block Envoy accepts (max_request_headers_kb is
// at most 8 MiB), which its rate_limits actions copy into descriptors —
// a path in several descriptors included. A request past it is refused
// by gRPC (ResourceExhausted), which Envoy would turn into "allow", so
// the bound sits above anything Envoy sends. A request is held twice at
// most while it is decided (as read, and the one copy its strings are
// cut from), and nothing of it after.
const MaxRequestBytes = 64 << 20

// ServerOptions are the options sluice serves gRPC with: keepalive pings
// from clients (Envoy's connection health checks) allowed every 10 s,
// requests bounded to MaxRequestBytes, requests read without refusing strings that
// are not UTF-8 (see codec), and a pool of stream workers at least as
// large as the calls usually in flight. Without the pool gRPC starts a
// goroutine per call, whose stack then grows to the depth of the handler
// on every call: a sixth of the server's CPU in a profile at 20,000 calls
// a second from 64 callers. A call that finds every worker busy still gets
// a goroutine of its own.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		grpc.NumStreamWorkers(uint32(max(64, 16*runtime.GOMAXPROCS(0)))),
		grpc.ForceServerCodecV2(newCodec()),
	}
}

// onePool holds the call of a request with one descriptor: nothing keeps
// a call once ShouldRateLimit returns (the limiter reads the request, the
// answer holds none of its values).
var onePool = sync.Pool{New: func() any { return new([1]call) }}

// ShouldRateLimit implements RateLimitService: see the package doc.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	var start time.Time
	if s.cfg.Metrics != nil || s.cfg.AccessLog != nil {
		start = time.Now()
	}
	var calls []call
	var one *[1]call
	if n := len(req.GetDescriptors()); n > 1 && n <= MaxDescriptors {
		calls = make([]call, n)
	} else {
		// One descriptor, the usual request: its call (1.2 KiB, mostly the
		// entries array) comes from a pool, not the heap.
		one = onePool.Get().(*[1]call)
		calls = one[:]
		defer func() {
			one[0] = call{} // keeps no caller's value
			onePool.Put(one)
		}()
	}
	resp, best, err := s.decide(ctx, req, calls, nil)
	if m := s.cfg.Metrics; m != nil {
		m.Latency(metrics.APIGRPC, time.Since(start))
		if err != nil {
			m.RLSAnswer(status.Code(err).String())
		} else {
			m.RLSAnswer(resp.OverallCode.String())
		}
	}
	if s.cfg.AccessLog != nil {
		s.accessLog(ctx, req, calls, resp, best, err, time.Since(start))
	}
	return resp, err
}

// decide answers req; best is the most restrictive decision, which the
// headers describe (its zero value when the request is malformed). With
// ex, it is a dry run (explain.go): nothing is taken, counted nor
// reported, and ex gets the explanation of each check.
func (s *Server) decide(ctx context.Context, req *rlsv3.RateLimitRequest, calls []call, ex *explaining) (*rlsv3.RateLimitResponse, limiter.Decision, error) {
	if err := parse(req, calls); err != nil {
		return nil, limiter.Decision{}, err
	}
	vs := s.views.Load()
	if vs == nil {
		return nil, limiter.Decision{}, status.Error(codes.Unavailable, "rls: no rules loaded yet")
	}
	lim := vs.prepare(req, calls)
	if ex != nil {
		for i := range calls {
			calls[i].desc.Dry = ex.rec // attached to every call with entries
		}
	}
	a := new(answer)
	resp := &a.resp
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	if len(calls) == 1 {
		resp.Statuses = a.one[:]
	} else {
		resp.Statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(calls))
	}
	// A descriptor without entries is OK and counts nothing, as in
	// envoyproxy/ratelimit (it matches no limit): the others are decided
	// as without it.
	statuses, live := resp.Statuses, calls
	if n := countLive(calls); n < len(calls) {
		statuses, live = make([]*rlsv3.RateLimitResponse_DescriptorStatus, 0, n), make([]call, 0, n)
		for i := range calls {
			if calls[i].empty {
				resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
			} else {
				live = append(live, calls[i])
			}
		}
		statuses = statuses[:n]
		if n == 0 {
			return resp, limiter.Decision{Allowed: true}, nil
		}
		defer func() { // the live statuses, in the places of their descriptors
			j := 0
			for i := range calls {
				if !calls[i].empty {
					resp.Statuses[i] = statuses[j]
					j++
				}
			}
		}()
	}
	var merged call
	if len(live) == 1 || !vs.entries && merge(live, &merged) {
		c := &live[0]
		if len(live) > 1 {
			c = &merged
		}
		d, err := lim.Check(ctx, &c.req)
		if err != nil {
			return nil, limiter.Decision{}, s.unavailable(ctx, err)
		}
		if ex != nil {
			ex.checks = []explainedCheck{{d: d, over: !d.Allowed}}
		} else {
			s.noteTooMany(req, &d)
			s.count(vs, &d, cost(&c.req), c.desc.Entries)
			if !d.Allowed && s.cfg.OnDenied != nil && d.Rule != nil {
				s.cfg.OnDenied(lim, &d, &c.req)
			}
		}
		st := &a.st
		fillStatus(st, &a.dur, &d, vs.limit(d.Rule))
		for i := range statuses {
			statuses[i] = st
		}
		if !d.Allowed {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		s.addHeaders(resp, &d, &a.headers, statuses, nil)
		if m := s.cfg.Metrics; m != nil && ex == nil {
			m.Decision(&d)
		}
		return resp, d, nil
	}

	var (
		ds      []limiter.Decision
		over    []bool // quota mode: each descriptor's code (quota.go)
		denied  bool
		handled bool
		err     error
	)
	var quotaOver []bool      // the quota descriptors over their limit, for the headers
	var qlim *limiter.Limiter // the domain's quota view, if its requests have quota rules
	if vs.quota != nil {
		qlim = vs.quota.view(req.GetDomain())
	}
	if qlim != nil {
		quotaOver = make([]bool, len(live))
		ds, over, denied, handled, err = s.decideQuota(ctx, lim, qlim, live)
		if err != nil {
			return nil, limiter.Decision{}, err
		}
		vs.fromQuota(ds)
	}
	if !handled {
		if ds, err = s.decideEach(ctx, lim, live); err != nil {
			return nil, limiter.Decision{}, err
		}
	}
	if denied {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	best := 0
	for i := range ds {
		d := &ds[i]
		if ex == nil {
			s.noteTooMany(req, d)
			s.count(vs, d, cost(&live[i].req), live[i].desc.Entries)
			if !d.Allowed && s.cfg.OnDenied != nil && d.Rule != nil {
				s.cfg.OnDenied(lim, d, &live[i].req)
			}
		}
		statuses[i] = descriptorStatus(d, vs.quotaLimit(d.Rule))
		if over != nil && over[i] {
			statuses[i].Code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if ex != nil {
			ex.checks = append(ex.checks, explainedCheck{d: *d, over: statuses[i].Code == rlsv3.RateLimitResponse_OVER_LIMIT})
		}
		if quotaOver != nil {
			// Over by a quota rule (step 3's decision, or step 4's shadow
			// denial), not by a plain one.
			quotaOver[i] = statuses[i].Code == rlsv3.RateLimitResponse_OVER_LIMIT &&
				(d.Rule != nil && d.Rule.Quota || over != nil && over[i] && d.Allowed)
		}
		if !d.Allowed {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if moreRestrictive(d, &ds[best]) {
			best = i
		}
		if m := s.cfg.Metrics; m != nil && ex == nil {
			m.Decision(d)
		}
	}
	s.addHeaders(resp, &ds[best], &a.headers, statuses, quotaOver)
	return resp, ds[best], nil
}

// cost returns the hits of req: its cost, 0 for a check without taking.
func cost(req *limiter.Request) int64 {
	if req.Peek {
		return 0
	}
	return max(req.Cost, 1)
}

// countLive returns the number of calls of descriptors with entries.
func countLive(calls []call) int {
	n := 0
	for i := range calls {
		if !calls[i].empty {
			n++
		}
	}
	return n
}

// decideEach decides each call as its own check, all or nothing, in one
// limiter.CheckMany: every call's rules taken in one store operation
// (beyond limiter.MaxRulesPerCall buckets, in atomic steps of that many).
func (s *Server) decideEach(ctx context.Context, lim *limiter.Limiter, calls []call) ([]limiter.Decision, error) {
	reqs := make([]limiter.Request, len(calls))
	for i := range calls {
		reqs[i] = calls[i].req
	}
	ds := make([]limiter.Decision, len(calls))
	if err := lim.CheckMany(ctx, reqs, ds); err != nil {
		return nil, s.unavailable(ctx, err)
	}
	return ds, nil
}

// noteTooMany logs, at most once a second, a descriptor denied because it
// matches more rules than one decision applies (algorithm.
// ReasonTooManyRules): a rule set that leaves no room for what the
// descriptor brings (its own limit, rules on its entries). The metrics
// count it as a denial without a rule.
func (s *Server) noteTooMany(req *rlsv3.RateLimitRequest, d *limiter.Decision) {
	if d.Reason != algorithm.ReasonTooManyRules {
		return
	}
	s.tooMany.Warn(s.cfg.Logger, "rls: a descriptor matches too many rules: denied (OVER_LIMIT)",
		"domain", req.GetDomain(), "max_rules_per_call", limiter.MaxRulesPerCall)
}

// unavailable turns a limiter error into the gRPC error Envoy gets, and
// logs it at most once a second.
func (s *Server) unavailable(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	}
	s.failures.Warn(s.cfg.Logger, "rls: limiter could not decide", "err", err)
	return status.Error(codes.Unavailable, "rls: the rate limiter could not decide: "+err.Error())
}

// accessLog writes the access log line of one request.
func (s *Server) accessLog(ctx context.Context, req *rlsv3.RateLimitRequest, calls []call,
	resp *rlsv3.RateLimitResponse, d limiter.Decision, err error, took time.Duration) {
	code := "OK"
	switch {
	case err != nil:
		code = status.Code(err).String()
	case resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT:
		code = "OVER_LIMIT"
	}
	attrs := []slog.Attr{
		slog.String("api", "grpc"),
		slog.String("domain", req.GetDomain()),
		slog.Int("descriptors", len(req.GetDescriptors())),
		slog.String("code", code),
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", status.Convert(err).Message()))
	} else {
		attrs = append(attrs, slog.String("rule", d.RuleID()), slog.String("plan", d.Plan)) // the effective plan
		if d.Rule != nil {
			attrs = append(attrs,
				slog.String("client", clientOf(d.KeyedBy, calls, s.cfg.Limiter.IPv6Prefix)),
				slog.Int64("limit", d.Limit),
				slog.Int64("remaining", max(d.Remaining, 0)),
				slog.Duration("retry_after", d.RetryAfter),
				slog.String("source", d.Origin.String()))
		}
		if d.ShadowDenied != "" {
			attrs = append(attrs, slog.String("shadow_denied", d.ShadowDenied))
		}
	}
	attrs = append(attrs, slog.Duration("took", took))
	s.cfg.AccessLog.LogAttrs(ctx, slog.LevelInfo, "decision", attrs...)
}

// clientOf names the client of kind by among the calls, as the HTTP API
// does ("user:alice", "ip:2001:db8::/64").
func clientOf(by rules.By, calls []call, ipv6Prefix int) string {
	for i := range calls {
		r := &calls[i].req
		id := identity.Identity{User: r.User, APIKey: r.APIKey, IP: r.IP}
		if c := id.ClientID(string(by), ipv6Prefix); c != "" {
			return c
		}
	}
	return ""
}
