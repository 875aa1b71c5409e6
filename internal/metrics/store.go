package metrics

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/rulestore"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store/failover"
	sredis "github.com/sluicehq/sluice/store/redis"
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
// "redis").
func (m *Metrics) Store(name string, next limiter.Store) *Store {
	return &Store{next: next, name: name, took: m.storeTime.WithLabelValues(name), m: m}
}

// Take implements limiter.Store.
func (s *Store) Take(ctx context.Context, ops []limiter.Op, res []algorithm.Result) (limiter.TakeInfo, error) {
	start := time.Now()
	info, err := s.next.Take(ctx, ops, res)
	s.took.Observe(time.Since(start).Seconds())
	if err != nil {
		s.m.storeErrs.WithLabelValues(s.name, ErrorKind(err)).Inc()
	}
	return info, err
}

// SharedCall records one call to the shared store made by the failover
// layer (the deadline-bound call to Redis itself, not the decision around
// it) under store="redis": its duration and, if it failed, its error kind.
func (m *Metrics) SharedCall(d time.Duration, err error) {
	m.storeTime.WithLabelValues("redis").Observe(d.Seconds())
	if err != nil {
		m.storeErrs.WithLabelValues("redis", ErrorKind(err)).Inc()
	}
}

// WatchFailover exports the failover layer's state: the breaker
// (sluice_store_breaker_state{state} = 1 for the current state), the live
// instances the local fallback divides limits by, the breaker's openings,
// the calls that went overdue and the probes they caused.
func (m *Metrics) WatchFailover(fo *failover.Store) {
	for _, st := range []failover.State{failover.Closed, failover.Open, failover.Connecting} {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "sluice_store_breaker_state",
			Help:        "1 for the shared store's circuit breaker state (closed: decisions go to Redis; open: the store is failing and decisions are local; connecting: never connected yet), 0 for the others.",
			ConstLabels: prometheus.Labels{"state": st.String()},
		}, func() float64 {
			if cur, _ := fo.State(); cur == st {
				return 1
			}
			return 0
		}))
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_instances",
		Help: "Live sluice instances the local fallback divides limits by (last known).",
	}, func() float64 { return float64(fo.Instances()) }))
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "sluice_store_breaker_openings_total",
		Help: "Times the shared store's circuit breaker opened.",
	}, func() float64 { return float64(fo.Stats().Opened.Load()) }))
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "sluice_store_overdue_total",
		Help: "Calls to the shared store still unanswered after --store-timeout (each made the breaker probe Redis; the call waited on).",
	}, func() float64 { return float64(fo.Stats().Overdue.Load()) }))
	for _, r := range []string{"ok", "failed"} {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "sluice_store_probes_total",
			Help:        "Probes of the shared store made while the breaker was closed, on a connection of their own, by result (a failed one opens the breaker).",
			ConstLabels: prometheus.Labels{"result": r},
		}, func() float64 {
			st := fo.Stats()
			if r == "failed" {
				return float64(st.ProbesFailed.Load())
			}
			return float64(st.Probes.Load() - st.ProbesFailed.Load())
		}))
	}
}

// ErrorKind classifies a store error for the kind label: timeout, canceled,
// network, redis (an error reply), reply (a reply of the wrong shape),
// too_many_rules or other.
func ErrorKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, limiter.ErrTooManyRules):
		return "too_many_rules"
	case errors.Is(err, sredis.ErrReply):
		return "reply"
	case errors.As(err, &ne):
		if ne.Timeout() {
			return "timeout"
		}
		return "network"
	case errors.Is(err, rueidis.ErrClosing), errors.Is(err, net.ErrClosed):
		return "network"
	}
	if _, ok := rueidis.IsRedisErr(err); ok {
		return "redis"
	}
	return "other"
}

// WatchBuckets exports sluice_store_buckets, read from n at each scrape
// (memory.Store.Len).
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
		Help: "Buckets the embedded in-memory store evicted to stay under its ceiling (--memory-max-buckets): those closest to full first.",
	}, func() float64 { return float64(n()) }))
}

// WatchLocalDenials exports sluice_store_local_denials_total, read from n at
// each scrape (redis.Store.LocalDenials).
func (m *Metrics) WatchLocalDenials(n func() int64) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "sluice_store_local_denials_total",
		Help: "Calls the shared store's local denial cache denied without a round trip to Redis.",
	}, func() float64 { return float64(n()) }))
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
