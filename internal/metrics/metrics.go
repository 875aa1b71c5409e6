// Package metrics defines every Prometheus metric sluice exports, served as
// GET /metrics on the data plane. It is the one place metrics are defined:
// other packages report to a *Metrics and never register their own.
//
//	sluice_decisions_total{rule,outcome,source}      decisions made
//	sluice_decision_duration_seconds{api}           time to decide a call (histogram)
//	sluice_rls_requests_total{code}                 Envoy ShouldRateLimit answers
//	sluice_http_errors_total{code}                  decision API answers other than 200, by HTTP status
//	sluice_store_duration_seconds{store}            one call to the counter store, a take or a reservation (histogram)
//	sluice_store_errors_total{store,kind}           failed calls to the counter store (takes and reservations), by kind of error
//	sluice_store_buckets                            buckets held by the embedded store
//	sluice_store_evictions_total                    full buckets the embedded store dropped to stay under its ceiling
//	sluice_store_overflows_total                    calls the embedded store, full, decided on a shared overflow bucket
//	sluice_store_local_denials_total                calls the Redis store's local denial cache denied without a round trip
//	sluice_store_script_runs_total                  script runs the Redis store sent
//	sluice_store_script_keys_total                  buckets (keys) those runs decided
//	sluice_rules_revision                           revision of the rules in force
//	sluice_rules_load_failing                       1 while the rules store holds a change that does not load
//	sluice_rules_load_errors_total                  rules store load failures
//	sluice_rules_database_refused                   1 while the rules store refuses its database (replaced, or at an older revision)
//	go_*, process_*                                 the Go runtime and the process
//
// Every label takes its values from a bounded set: rule is a rule id (or ""
// when no rule matched), bounded by the rule set, and the series of a rule
// are dropped when it leaves the rule set (SetRules); outcome, source, api,
// code, store and kind are fixed enumerations. No label ever holds a client
// key, an IP address or a path.
//
// Reporting a decision allocates nothing: the counters of each rule are
// looked up once per rules revision and cached by the rule's position.
package metrics

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
)

// numSources is the number of limiter.Origin values: store,
// local_denial_cache, lease, local_fallback, unavailable.
const numSources = limiter.OriginUnavailable + 1

// Outcome is what a decision said: the value of the outcome label.
type Outcome uint8

const (
	OutcomeAllowed      Outcome = iota // allowed, and no shadow rule would have denied
	OutcomeDenied                      // denied
	OutcomeShadowDenied                // allowed, but a shadow rule would have denied

	numOutcomes
)

var outcomeNames = [numOutcomes]string{"allowed", "denied", "shadow_denied"}

func (o Outcome) String() string {
	if o < numOutcomes {
		return outcomeNames[o]
	}
	return "unknown"
}

// OutcomeOf returns the outcome of d.
func OutcomeOf(d *limiter.Decision) Outcome {
	switch {
	case !d.Allowed:
		return OutcomeDenied
	case d.ShadowDenied != "":
		return OutcomeShadowDenied
	}
	return OutcomeAllowed
}

// API names the interface a decision was asked through: the value of the
// api label.
type API uint8

const (
	APIHTTP API = iota // POST /ratelimit/check
	APIGRPC            // Envoy's ShouldRateLimit

	numAPIs
)

var apiNames = [numAPIs]string{"http", "grpc"}

func (a API) String() string {
	if a < numAPIs {
		return apiNames[a]
	}
	return "unknown"
}

// latencyBuckets spans the embedded store's few microseconds to the
// shared store's timeouts, in seconds.
var latencyBuckets = []float64{
	5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6,
	1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1,
}

// Metrics holds sluice's metrics and the registry that serves them. Use New;
// safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry
	// console holds what the operator console reads once a second (the
	// decisions, the store's latency, the breaker), so that its reading
	// gathers nothing else (ConsoleGatherer).
	console *prometheus.Registry

	decisions  *prometheus.CounterVec
	decideTime [numAPIs]prometheus.Observer
	rlsCodes   *prometheus.CounterVec
	rlsOK      prometheus.Counter
	rlsOver    prometheus.Counter
	httpErrs   *prometheus.CounterVec
	revision   prometheus.Gauge
	storeTime  *prometheus.HistogramVec
	redisTime  atomic.Pointer[prometheus.Observer] // storeTime{store="redis"}, made by the first SharedCall
	storeErrs  *prometheus.CounterVec
	namer      ErrorNamer // the instrumented store's, if any: set before serving

	cache atomic.Pointer[ruleCache]
	mu    sync.Mutex // serializes SetRules and SetEnvoyKeys

	envoy *envoyVecs // envoyproxy/ratelimit's statistics (envoy.go)
}

// ruleCache holds the decision counters of one rule set, by rule position.
type ruleCache struct {
	ix     *rules.Index
	byRule []ruleCounters // by Compiled.Seq
	none   ruleCounters   // no rule matched
}

// ruleCounters are one rule's decision counters by outcome and source. The
// store source is filled when the cache is built, the others on first use.
type ruleCounters struct {
	rule *rules.Compiled
	id   string
	c    [numOutcomes][numSources]atomic.Pointer[counter] // by Outcome, limiter.Origin
}

type counter struct{ prometheus.Counter }

// New returns metrics registered on a registry of their own, with the Go
// runtime and process collectors.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), console: prometheus.NewRegistry()}
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_decisions_total",
		Help: "Decisions made, by the most restrictive rule (\"\" when no rule matched; for shadow_denied, the shadow rule that would have denied), outcome (allowed, denied, shadow_denied) and source (store, local_denial_cache, lease, local_fallback, unavailable).",
	}, []string{"rule", "outcome", "source"})
	decideTime := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_decision_duration_seconds",
		Help:    "Time to decide one call, from its parsed request to its answer, by API (http, grpc).",
		Buckets: latencyBuckets,
	}, []string{"api"})
	for a := range numAPIs {
		m.decideTime[a] = decideTime.WithLabelValues(a.String())
	}
	m.rlsCodes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_rls_requests_total",
		Help: "Envoy ShouldRateLimit requests answered, by code: OK, OVER_LIMIT, or the gRPC status of an error (InvalidArgument, Unavailable, ...).",
	}, []string{"code"})
	m.rlsOK, m.rlsOver = m.rlsCodes.WithLabelValues("OK"), m.rlsCodes.WithLabelValues("OVER_LIMIT")
	m.httpErrs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_http_errors_total",
		Help: "Answers of the decision API (POST /ratelimit/check, /ratelimit/reserve) other than 200, by HTTP status: 400 malformed request, 404 no budget, 409, 413 body too large, 415, 500 internal, 503 the limiter could not decide.",
	}, []string{"code"})
	m.revision = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sluice_rules_revision",
		Help: "Revision of the rules in force.",
	})
	m.storeTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_store_duration_seconds",
		Help:    "Time of one call to the counter store, a take or a reservation (one call's rules), by store (memory, failover, redis, other).",
		Buckets: latencyBuckets,
	}, []string{"store"})
	m.storeErrs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_store_errors_total",
		Help: "Calls to the counter store (takes and reservations) that failed, by store and kind (timeout, canceled, network, redis, reply, too_many_rules, other).",
	}, []string{"store", "kind"})
	m.envoy = newEnvoyVecs()
	m.reg.MustRegister(m.decisions, decideTime, m.rlsCodes, m.httpErrs, m.revision, m.storeTime, m.storeErrs,
		m.envoy.total, m.envoy.over, m.envoy.near, m.envoy.within, m.envoy.shadow,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.console.MustRegister(m.decisions, m.storeTime)
	m.cache.Store(m.buildCache(nil, nil))
	return m
}

// ConsoleGatherer gathers the metrics the operator console reads
// (console.Sampler): sluice_decisions_total,
// sluice_store_duration_seconds and sluice_store_breaker_state, and
// nothing else.
func (m *Metrics) ConsoleGatherer() prometheus.Gatherer { return m.console }

// Registry returns the registry the metrics are on, to register more.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus text (or OpenMetrics, when
// asked) exposition format, for GET /metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// SetRules puts ix's rules in the decision counters and the revision
// gauge, and drops the series of rules that left the rule set. Call it
// whenever the limiter gets new rules; decisions made under another rule
// set are still counted, by a slower lookup.
func (m *Metrics) SetRules(ix *rules.Index) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.cache.Load()
	if old.ix == ix {
		return
	}
	m.cache.Store(m.buildCache(ix, old))
	m.revision.Set(float64(ix.Revision()))
	for i := range old.byRule {
		id := old.byRule[i].id
		if _, ok := ix.Rule(id); !ok {
			m.decisions.DeletePartialMatch(prometheus.Labels{"rule": id})
		}
	}
}

// buildCache returns the counters of ix's rules, reusing old's.
func (m *Metrics) buildCache(ix *rules.Index, old *ruleCache) *ruleCache {
	c := &ruleCache{ix: ix}
	c.none.init(m, nil, old.counters(""))
	rs := ix.Rules()
	c.byRule = make([]ruleCounters, len(rs))
	for i, r := range rs {
		c.byRule[i].rule = r
		c.byRule[i].init(m, r, old.counters(r.ID))
	}
	return c
}

// counters returns the counters of the rule with id in c, nil if none.
func (c *ruleCache) counters(id string) *ruleCounters {
	if c == nil {
		return nil
	}
	if id == "" {
		return &c.none
	}
	if r, ok := c.ix.Rule(id); ok && r.Seq < len(c.byRule) {
		return &c.byRule[r.Seq]
	}
	return nil
}

// init makes rc the counters of rule r (nil: no rule): old's where it has
// them, and made now those of the store source that r can report —
// allowed, and denied (shadow_denied for a shadow rule) — so that their
// series exist from the start.
func (rc *ruleCounters) init(m *Metrics, r *rules.Compiled, old *ruleCounters) {
	if r != nil {
		rc.id = r.ID
	}
	for o := range numOutcomes {
		for s := range numSources {
			if old != nil {
				if p := old.c[o][s].Load(); p != nil {
					rc.c[o][s].Store(p)
					continue
				}
			}
			eager := o == OutcomeAllowed || r != nil && (o == OutcomeShadowDenied) == r.Shadow
			if s == limiter.OriginStore && eager {
				rc.c[o][s].Store(&counter{m.decisions.WithLabelValues(rc.id, o.String(), s.String())})
			}
		}
	}
}

// get returns the counter of (outcome, source), making it on first use.
func (rc *ruleCounters) get(m *Metrics, o Outcome, s limiter.Origin) prometheus.Counter {
	if p := rc.c[o][s].Load(); p != nil {
		return p.Counter
	}
	p := &counter{m.decisions.WithLabelValues(rc.id, o.String(), s.String())}
	rc.c[o][s].Store(p) // a racing store holds the same child
	return p.Counter
}

// Decision counts one decision d, under its rule, outcome and source. It
// does not allocate when d was made under the rules last given to SetRules.
func (m *Metrics) Decision(d *limiter.Decision) {
	src := d.Origin
	if src >= numSources {
		src = limiter.OriginStore
	}
	o := OutcomeOf(d)
	c := m.cache.Load()
	var rc *ruleCounters
	switch {
	case o == OutcomeShadowDenied:
		rc = c.counters(d.ShadowDenied)
	case d.Rule == nil:
		rc = &c.none
	case d.Rule.Seq < len(c.byRule) && c.byRule[d.Rule.Seq].rule == d.Rule:
		rc = &c.byRule[d.Rule.Seq]
	default:
		rc = c.counters(d.Rule.ID)
	}
	if rc == nil { // decided under rules that are no longer in force
		id := d.ShadowDenied
		if o != OutcomeShadowDenied {
			id = d.Rule.ID
		}
		m.decisions.WithLabelValues(id, o.String(), src.String()).Inc()
		return
	}
	rc.get(m, o, src).Inc()
}

// Latency records the time one decision took through api.
func (m *Metrics) Latency(api API, d time.Duration) {
	if api < numAPIs {
		m.decideTime[api].Observe(d.Seconds())
	}
}

// HTTPError counts one answer of the decision API other than 200, by
// its status (the server's own statuses: a bounded set).
func (m *Metrics) HTTPError(status int) {
	m.httpErrs.WithLabelValues(strconv.Itoa(status)).Inc()
}

// RLSAnswer counts one answer of Envoy's ShouldRateLimit with its code:
// "OK", "OVER_LIMIT", or a gRPC status code name.
func (m *Metrics) RLSAnswer(code string) {
	switch code {
	case "OK":
		m.rlsOK.Inc()
	case "OVER_LIMIT":
		m.rlsOver.Inc()
	default:
		m.rlsCodes.WithLabelValues(code).Inc()
	}
}
