package console

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Samples bounds the Sampler's memory: one sample a second for five
// minutes, each the cumulative decision counts of every rule (bounded by
// the rule set) and the store's latency histogram.
const Samples = 300

// Sampler reads, once a second, the decision counters
// (sluice_decisions_total), the store's latency histogram
// (sluice_store_duration_seconds) and the breaker state
// (sluice_store_breaker_state) from the metrics the limiter already
// reports to, and keeps the last Samples readings: the console's rates are
// differences between them. It adds nothing to the decision path.
type Sampler struct {
	g   prometheus.Gatherer
	now func() time.Time

	mu      sync.Mutex
	samples []sample // oldest first, at most Samples
}

type sample struct {
	at      time.Time
	rules   map[string]counts // by rule id ("" no rule matched)
	local   float64           // decisions not made by the store (local denial cache, fallback, unavailable)
	latency map[string][]bucket
	breaker string
}

type counts struct{ allowed, denied float64 }

type bucket struct {
	le    float64
	count float64
}

// NewSampler returns a sampler of g. Run it with Run.
func NewSampler(g prometheus.Gatherer) *Sampler { return &Sampler{g: g, now: time.Now} }

// Run samples every interval (1 s when ≤ 0) until ctx is done.
func (s *Sampler) Run(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = time.Second
	}
	s.Sample()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Sample()
		}
	}
}

// Sample takes one reading now.
func (s *Sampler) Sample() {
	mfs, err := s.g.Gather()
	if err != nil && len(mfs) == 0 {
		return
	}
	sm := sample{at: s.now(), rules: map[string]counts{}, latency: map[string][]bucket{}}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "sluice_decisions_total":
			for _, m := range mf.GetMetric() {
				l := labels(m)
				v := m.GetCounter().GetValue()
				c := sm.rules[l["rule"]]
				if l["outcome"] == "denied" {
					c.denied += v
				} else {
					c.allowed += v
				}
				sm.rules[l["rule"]] = c
				if l["source"] != "store" {
					sm.local += v
				}
			}
		case "sluice_store_duration_seconds":
			for _, m := range mf.GetMetric() {
				h := m.GetHistogram()
				bs := make([]bucket, 0, len(h.GetBucket())+1)
				for _, b := range h.GetBucket() {
					bs = append(bs, bucket{b.GetUpperBound(), float64(b.GetCumulativeCount())})
				}
				bs = append(bs, bucket{math.Inf(1), float64(h.GetSampleCount())})
				sm.latency[labels(m)["store"]] = bs
			}
		case "sluice_store_breaker_state":
			for _, m := range mf.GetMetric() {
				if m.GetGauge().GetValue() == 1 {
					sm.breaker = labels(m)["state"]
				}
			}
		}
	}
	s.mu.Lock()
	if len(s.samples) == Samples {
		copy(s.samples, s.samples[1:])
		s.samples = s.samples[:Samples-1]
	}
	s.samples = append(s.samples, sm)
	s.mu.Unlock()
}

func labels(m *dto.Metric) map[string]string {
	l := make(map[string]string, len(m.GetLabel()))
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

// Point is one second of a rate series.
type Point struct {
	T       int64   `json:"t"` // Unix seconds
	Allowed float64 `json:"allowed"`
	Denied  float64 `json:"denied"`
}

// RuleRate is one rule's decisions per second.
type RuleRate struct {
	Rule    string  `json:"rule"` // "" for calls no rule matched
	Allowed float64 `json:"allowed"`
	Denied  float64 `json:"denied"`
	Series  []Point `json:"series"`
}

// Latency is the store's latency percentiles over the last minute, in
// milliseconds, as the histogram's buckets bound them (each figure is the
// upper bound of the bucket the percentile falls in).
type Latency struct {
	Store string  `json:"store"`
	Calls float64 `json:"calls"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
}

// Now is what the console's first page shows.
type Now struct {
	// Window is the span Allowed, Denied and LocalShare cover, in seconds
	// (the last 10 s, less just after start).
	Window     float64    `json:"window_s"`
	Allowed    float64    `json:"allowed_per_s"`
	Denied     float64    `json:"denied_per_s"`
	Series     []Point    `json:"series"` // the last five minutes, a point a second
	Rules      []RuleRate `json:"per_rule"`
	LocalShare float64    `json:"local_share"` // of decisions in the last minute, made without the store (0 to 1)
	Latency    []Latency  `json:"latency"`
	Breaker    string     `json:"breaker,omitempty"` // closed, open, connecting; "" without a shared store
}

// Now returns the rates over the samples kept.
func (s *Sampler) Now() Now {
	s.mu.Lock()
	ss := slices.Clone(s.samples)
	s.mu.Unlock()
	out := Now{Series: []Point{}, Rules: []RuleRate{}, Latency: []Latency{}}
	if len(ss) == 0 {
		return out
	}
	last := ss[len(ss)-1]
	out.Breaker = last.breaker
	ids := make([]string, 0, len(last.rules))
	for id := range last.rules {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	perRule := map[string]*RuleRate{}
	for _, id := range ids {
		perRule[id] = &RuleRate{Rule: id, Series: []Point{}}
	}
	for i := 1; i < len(ss); i++ {
		a, b := ss[i-1], ss[i]
		dt := b.at.Sub(a.at).Seconds()
		if dt <= 0 {
			continue
		}
		p := Point{T: b.at.Unix()}
		for _, id := range ids {
			ca, cb := a.rules[id], b.rules[id]
			rp := Point{T: p.T, Allowed: max(cb.allowed-ca.allowed, 0) / dt, Denied: max(cb.denied-ca.denied, 0) / dt}
			perRule[id].Series = append(perRule[id].Series, rp)
			p.Allowed += rp.Allowed
			p.Denied += rp.Denied
		}
		out.Series = append(out.Series, p)
	}
	// Rates over the last 10 s.
	from := ss[max(len(ss)-11, 0)]
	if dt := last.at.Sub(from.at).Seconds(); dt > 0 {
		out.Window = dt
		for _, id := range ids {
			r := perRule[id]
			r.Allowed = max(last.rules[id].allowed-from.rules[id].allowed, 0) / dt
			r.Denied = max(last.rules[id].denied-from.rules[id].denied, 0) / dt
			out.Allowed += r.Allowed
			out.Denied += r.Denied
		}
	}
	for _, id := range ids {
		out.Rules = append(out.Rules, *perRule[id])
	}
	// Local share and latency over the last minute.
	minute := ss[max(len(ss)-61, 0)]
	var all, allMinute float64
	for _, c := range last.rules {
		all += c.allowed + c.denied
	}
	for _, c := range minute.rules {
		allMinute += c.allowed + c.denied
	}
	if d := all - allMinute; d > 0 {
		out.LocalShare = max(last.local-minute.local, 0) / d
	}
	stores := make([]string, 0, len(last.latency))
	for st := range last.latency {
		stores = append(stores, st)
	}
	slices.Sort(stores)
	for _, st := range stores {
		out.Latency = append(out.Latency, latency(st, minute.latency[st], last.latency[st]))
	}
	return out
}

// latency returns the percentiles of the calls between two readings of a
// cumulative histogram.
func latency(store string, before, after []bucket) Latency {
	l := Latency{Store: store}
	d := make([]bucket, len(after))
	for i, b := range after {
		d[i] = b
		if i < len(before) && before[i].le == b.le {
			d[i].count -= before[i].count
		}
	}
	if len(d) == 0 {
		return l
	}
	l.Calls = d[len(d)-1].count
	q := func(p float64) float64 {
		if l.Calls == 0 {
			return 0
		}
		want := p * l.Calls
		for _, b := range d {
			if b.count >= want {
				if math.IsInf(b.le, 1) {
					return math.Inf(1)
				}
				return b.le * 1000
			}
		}
		return 0
	}
	l.P50, l.P90, l.P99 = q(0.5), q(0.9), q(0.99)
	if math.IsInf(l.P99, 1) { // JSON has no infinity: above the last bucket
		l.P99 = -1
	}
	if math.IsInf(l.P90, 1) {
		l.P90 = -1
	}
	if math.IsInf(l.P50, 1) {
		l.P50 = -1
	}
	return l
}
