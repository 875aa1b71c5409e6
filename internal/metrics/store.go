package metrics

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/rulestore"
	"github.com/sluicehq/sluice/limiter"
)

// Store wraps a limiter.Store to time every Take into
// sluice_store_duration_seconds and count its errors in
// sluice_store_errors_total, under the label store=name. Safe for
// concurrent use; it adds two clock readings and a histogram update to a
// take, and no allocation.
type Store struct {
	next limiter.Store
	name string
	took prometheus.Observer
	m    *Metrics
}

var _ limiter.Store = (*Store)(nil)

// Store returns next instrumented under the label store=name ("memory",
// "redis"); Instrument also names it and exports its own state.
func (m *Metrics) Store(name string, next limiter.Store) *Store {
	return &Store{next: next, name: name, took: m.storeTime.WithLabelValues(name), m: m}
}

// Take implements limiter.Store.
func (s *Store) Take(ctx context.Context, ops []limiter.Op, res []algorithm.Result) (limiter.TakeInfo, error) {
	start := time.Now()
	info, err := s.next.Take(ctx, ops, res)
	s.done(start, err)
	return info, err
}

// done records a call to the wrapped store made at start that ended in err:
// its duration and, if it failed, its error kind.
func (s *Store) done(start time.Time, err error) {
	s.took.Observe(time.Since(start).Seconds())
	if err != nil {
		s.m.storeErrs.WithLabelValues(s.name, s.m.errorKind(err)).Inc()
	}
}

// SharedCall records one call to the shared store made by the failover
// layer (the deadline-bound call to Redis itself, not the decision around
// it) under store="redis": its duration and, if it failed, its error kind.
func (m *Metrics) SharedCall(d time.Duration, err error) {
	o := m.redisTime.Load()
	if o == nil {
		// Looked up once, not per call; made on first use, so that a
		// process without Redis exports no store="redis" series.
		h := m.storeTime.WithLabelValues("redis")
		o = &h
		m.redisTime.Store(o)
	}
	(*o).Observe(d.Seconds())
	if err != nil {
		m.storeErrs.WithLabelValues("redis", m.errorKind(err)).Inc()
	}
}

// What metrics reads from a store, if the store has it. Each store
// implements those that fit it; Instrument finds them.
type (
	// BucketStore holds its buckets in this process (store/memory.Store).
	BucketStore interface {
		Len() int          // buckets held
		Evictions() uint64 // full buckets dropped to stay under the ceiling
		Overflows() uint64 // calls decided on a shared overflow bucket at the ceiling
	}
	// Breaker is a store layer with a circuit breaker before a shared store
	// and a local fallback behind it (store/failover.Store).
	Breaker interface {
		// BreakerState names the breaker's state: "closed", "open" or
		// "connecting".
		BreakerState() string
		// Instances is the live instance count the fallback divides
		// limits by.
		Instances() int
		// BreakerCounts are the running counts: the breaker's openings,
		// the calls overdue, the probes made and those that failed.
		BreakerCounts() (openings, overdue, probes, probesFailed int64)
		// SetOnCall sets the function told about every call to the
		// shared store.
		SetOnCall(fn func(d time.Duration, err error))
	}
	// ShardBreaker keeps a breaker per shard of the shared store
	// (store/failover.Store over a Redis Cluster).
	ShardBreaker interface {
		// EachShard calls fn for each shard: its name (a master's
		// address; "all" for a store of one shard), whether its breaker
		// is open, its openings and the decisions its callers got
		// without the shared store.
		EachShard(fn func(name string, open bool, openings, local int64))
	}
	// LocalDenier has a local denial cache (store/redis.Store,
	// store/failover.Store).
	LocalDenier interface {
		// LocalDenials is the count of calls it denied without a round
		// trip to the shared store.
		LocalDenials() int64
	}
	// ScriptRunner counts the script runs it sent to the shared store and
	// the keys they decided (store/redis.Store, store/failover.Store).
	ScriptRunner interface {
		ScriptRuns() (runs, keys int64)
	}
	// RefundCounter counts the cross-shard give-backs that failed
	// (store/redis.Store, store/failover.Store).
	RefundCounter interface {
		RefundErrors() int64
	}
	// ErrorNamer names the kind of the errors only it knows (a Redis error
	// reply: "redis"), or says "" (store/redis.Store, store/failover.Store).
	ErrorNamer interface {
		ErrorKind(err error) string
	}
)

// breakerStates are the values of sluice_store_breaker_state's label.
var breakerStates = [...]string{"closed", "open", "connecting"}

// Instrument returns st instrumented (Store) under the label store=
// "failover" for a Breaker (the decision's time in the store layer: Redis
// or, while it fails, the local fallback; the calls to Redis themselves
// are store="redis", through SetOnCall), "memory" for a BucketStore,
// "other" else, and exports what st tells of itself through the interfaces
// above.
func (m *Metrics) Instrument(st limiter.Store) *Store {
	if n, ok := st.(ErrorNamer); ok {
		m.namer = n
	}
	name := "other"
	if b, ok := st.(BucketStore); ok {
		name = "memory"
		m.WatchBuckets(b.Len)
		m.WatchEvictions(b.Evictions)
		m.WatchOverflows(b.Overflows)
	}
	if b, ok := st.(Breaker); ok {
		name = "failover"
		b.SetOnCall(m.SharedCall)
		m.WatchBreaker(b)
	}
	if b, ok := st.(ShardBreaker); ok {
		m.WatchShards(b)
	}
	if r, ok := st.(RefundCounter); ok {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_store_refund_errors_total",
			Help: "Cross-shard give-backs that failed: each left a caller charged for a call it was denied (never tried again: a refund whose answer was lost may have run).",
		}, func() float64 { return float64(r.RefundErrors()) }))
	}
	if d, ok := st.(LocalDenier); ok {
		m.WatchLocalDenials(d.LocalDenials)
	}
	if r, ok := st.(ScriptRunner); ok {
		m.WatchScriptRuns(r.ScriptRuns)
	}
	return m.Store(name, st)
}

// WatchBreaker exports the state of b: the breaker
// (sluice_store_breaker_state{state} = 1 for the current state), the live
// instances the local fallback divides limits by, the breaker's openings,
// the calls that went overdue and the probes they caused.
func (m *Metrics) WatchBreaker(b Breaker) {
	for _, st := range breakerStates {
		g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "sluice_store_breaker_state",
			Help:        "1 for the shared store's circuit breaker state (closed: decisions go to Redis; open: the store is failing and decisions are local; connecting: never connected yet), 0 for the others.",
			ConstLabels: prometheus.Labels{"state": st},
		}, func() float64 {
			if b.BreakerState() == st {
				return 1
			}
			return 0
		})
		m.reg.MustRegister(g)
		m.console.MustRegister(g)
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_instances",
		Help: "Live sluice instances the local fallback divides limits by (last known).",
	}, func() float64 { return float64(b.Instances()) }))
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "sluice_store_breaker_openings_total",
		Help: "Times the shared store's circuit breaker opened.",
	}, func() float64 { n, _, _, _ := b.BreakerCounts(); return float64(n) }))
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "sluice_store_overdue_total",
		Help: "Calls to the shared store still unanswered after --store-timeout (each made the breaker probe Redis; the call waited on).",
	}, func() float64 { _, n, _, _ := b.BreakerCounts(); return float64(n) }))
	for _, r := range []string{"ok", "failed"} {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "sluice_store_probes_total",
			Help:        "Probes of the shared store made while the breaker was closed, on a connection of their own, by result (a failed one opens the breaker).",
			ConstLabels: prometheus.Labels{"result": r},
		}, func() float64 {
			_, _, probes, failed := b.BreakerCounts()
			if r == "failed" {
				return float64(failed)
			}
			return float64(probes - failed)
		}))
	}
}

// WatchShards exports, per shard of the shared store, whether its breaker
// is open (sluice_store_shard_breaker_open), its openings
// (sluice_store_shard_breaker_openings_total) and the decisions its
// callers got without the store (sluice_store_shard_local_decisions_total:
// the local fallback's and fail-closed denials), read at each scrape. The
// shard label is a master's address ("all" for a store of one shard): as
// many values as the cluster has masters, at most 64.
func (m *Metrics) WatchShards(b ShardBreaker) {
	m.reg.MustRegister(shardCollector{b})
}

var (
	shardOpenDesc = prometheus.NewDesc("sluice_store_shard_breaker_open",
		"1 while the circuit breaker of this shard of the shared store is open (its callers are decided locally), else 0.", []string{"shard"}, nil)
	shardOpeningsDesc = prometheus.NewDesc("sluice_store_shard_breaker_openings_total",
		"Times the circuit breaker of this shard of the shared store opened.", []string{"shard"}, nil)
	shardLocalDesc = prometheus.NewDesc("sluice_store_shard_local_decisions_total",
		"Decisions made without the shared store for callers of this shard (local fallback, and fail-closed denials).", []string{"shard"}, nil)
)

type shardCollector struct{ b ShardBreaker }

func (c shardCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- shardOpenDesc
	ch <- shardOpeningsDesc
	ch <- shardLocalDesc
}

func (c shardCollector) Collect(ch chan<- prometheus.Metric) {
	c.b.EachShard(func(name string, open bool, openings, local int64) {
		v := 0.0
		if open {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(shardOpenDesc, prometheus.GaugeValue, v, name)
		ch <- prometheus.MustNewConstMetric(shardOpeningsDesc, prometheus.CounterValue, float64(openings), name)
		ch <- prometheus.MustNewConstMetric(shardLocalDesc, prometheus.CounterValue, float64(local), name)
	})
}

// ErrorKind classifies a store error for the kind label: timeout, canceled,
// network, reply (a reply of the wrong shape), too_many_rules or other.
// The kinds only a store knows (redis, an error reply) are its
// ErrorNamer's: see Instrument.
func ErrorKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, limiter.ErrTooManyRules):
		return "too_many_rules"
	case errors.Is(err, limiter.ErrStoreReply):
		return "reply"
	case errors.As(err, &ne):
		if ne.Timeout() {
			return "timeout"
		}
		return "network"
	case errors.Is(err, net.ErrClosed):
		return "network"
	}
	return "other"
}

// errorKind is ErrorKind, or the instrumented store's name for an error
// ErrorKind calls other.
func (m *Metrics) errorKind(err error) string {
	k := ErrorKind(err)
	if k == "other" && m.namer != nil {
		if n := m.namer.ErrorKind(err); n != "" {
			return n
		}
	}
	return k
}

// WatchBuckets exports sluice_store_buckets, read from n at each scrape
// (BucketStore.Len).
func (m *Metrics) WatchBuckets(n func() int) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_store_buckets",
		Help: "Buckets held by the embedded in-memory store (idle ones are swept).",
	}, func() float64 { return float64(n()) }))
}

// WatchEvictions exports sluice_store_evictions_total, read from n at each
// scrape (memory.Store.Evictions).
func (m *Metrics) WatchEvictions(n func() uint64) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "sluice_store_evictions_total",
		Help: "Full (idle) buckets the embedded in-memory store dropped to stay under its ceiling (--memory-max-buckets); a bucket with state is never dropped.",
	}, func() float64 { return float64(n()) }))
}

// WatchOverflows exports sluice_store_overflows_total, read from n at each
// scrape (memory.Store.Overflows).
func (m *Metrics) WatchOverflows(n func() uint64) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "sluice_store_overflows_total",
		Help: "Calls of new callers the embedded in-memory store, at its ceiling with no full bucket to drop, decided on the shared overflow bucket of their rule.",
	}, func() float64 { return float64(n()) }))
}

// WatchLocalDenials exports sluice_store_local_denials_total, read from n at
// each scrape (LocalDenier.LocalDenials).
func (m *Metrics) WatchLocalDenials(n func() int64) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "sluice_store_local_denials_total",
		Help: "Calls the shared store's local denial cache denied without a round trip to Redis.",
	}, func() float64 { return float64(n()) }))
}

// WatchScriptRuns exports sluice_store_script_runs_total and
// sluice_store_script_keys_total, read from n at each scrape
// (ScriptRunner.ScriptRuns).
func (m *Metrics) WatchScriptRuns(n func() (runs, keys int64)) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "sluice_store_script_runs_total",
		Help: "Script runs the Redis store sent to Redis (take.lua and reserve.lua; a run retried on TRYAGAIN counted once).",
	}, func() float64 { r, _ := n(); return float64(r) }))
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "sluice_store_script_keys_total",
		Help: "Buckets (keys) those script runs decided: keys per run is how many a run carried, which calls sharing runs raises.",
	}, func() float64 { _, k := n(); return float64(k) }))
}

// WatchRules exports the state of a rules store, read at each scrape:
// sluice_rules_load_failing (1 while the store holds a change that does
// not load, so that older rules stay in force) and
// sluice_rules_load_errors_total (each distinct load problem, counted
// once when a scrape first sees it: a problem fixed between two scrapes is
// not counted), and sluice_rules_database_refused (1 while the store
// refuses its database: another one, or an older revision, than the one
// whose rules are in force). status is rulestore.Source.Status.
func (m *Metrics) WatchRules(status func() rulestore.Status) {
	m.reg.MustRegister(&rulesCollector{status: status})
}

type rulesCollector struct {
	status func() rulestore.Status

	mu     sync.Mutex
	lastAt time.Time // ErrorAt of the last problem counted
	errors float64
}

var (
	rulesFailingDesc = prometheus.NewDesc("sluice_rules_load_failing",
		"1 while the rules store holds a change that does not load (the last good rules stay in force), else 0.", nil, nil)
	rulesErrorsDesc = prometheus.NewDesc("sluice_rules_load_errors_total",
		"Rules store load failures (each distinct problem, counted when a scrape first sees it).", nil, nil)
	rulesRefusedDesc = prometheus.NewDesc("sluice_rules_database_refused",
		"1 while the rules store refuses its database (another database, or an older revision, than the one whose rules are in force; see /readyz), else 0.", nil, nil)
)

func (c *rulesCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- rulesFailingDesc
	ch <- rulesErrorsDesc
	ch <- rulesRefusedDesc
}

func (c *rulesCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.status()
	failing := 0.0
	c.mu.Lock()
	if st.Error != "" {
		failing = 1
		if !st.ErrorAt.Equal(c.lastAt) {
			c.lastAt = st.ErrorAt
			c.errors++
		}
	}
	n := c.errors
	c.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(rulesFailingDesc, prometheus.GaugeValue, failing)
	ch <- prometheus.MustNewConstMetric(rulesErrorsDesc, prometheus.CounterValue, n)
	refused := 0.0
	if st.Refused {
		refused = 1
	}
	ch <- prometheus.MustNewConstMetric(rulesRefusedDesc, prometheus.GaugeValue, refused)
}
