package metrics

import (
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// envoyVecs are envoyproxy/ratelimit's per-descriptor statistics, as
// Prometheus counters labelled by domain and descriptor key.
type envoyVecs struct {
	total, over, near, within, shadow *prometheus.CounterVec
	keys                              map[[2]string]bool // the (domain, key) pairs in force
	details                           map[[2]string]*EnvoyDetail
}

func newEnvoyVecs() *envoyVecs {
	vec := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"domain", "key"})
	}
	return &envoyVecs{
		total:  vec("sluice_envoy_total_hits_total", "Envoy API: hits (hits_addend, 1 by default) on each descriptor key, as envoyproxy/ratelimit's total_hits."),
		over:   vec("sluice_envoy_over_limit_total", "Envoy API: hits on each descriptor key denied by its limit (a shadow rule's included), as envoyproxy/ratelimit's over_limit."),
		near:   vec("sluice_envoy_near_limit_total", "Envoy API: hits on each descriptor key allowed past the near-limit ratio of its limit, as envoyproxy/ratelimit's near_limit."),
		within: vec("sluice_envoy_within_limit_total", "Envoy API: hits on each descriptor key within its limit, as envoyproxy/ratelimit's within_limit."),
		shadow: vec("sluice_envoy_shadow_mode_total", "Envoy API: hits on each descriptor key a shadow rule would have denied, as envoyproxy/ratelimit's shadow_mode."),
	}
}

// EnvoyStats are the counters of one descriptor key (EnvoyStats).
type EnvoyStats struct {
	Total, Over, Near, Within, Shadow prometheus.Counter
}

// EnvoyStats returns the counters of descriptor key in domain, made now
// and kept while SetEnvoyKeys names the pair. Both labels come from the
// rules (a rule's domain and descriptor key), never from a request.
func (m *Metrics) EnvoyStats(domain, key string) *EnvoyStats {
	v := m.envoy
	l := []string{domain, key}
	return &EnvoyStats{
		Total: v.total.WithLabelValues(l...), Over: v.over.WithLabelValues(l...), Near: v.near.WithLabelValues(l...),
		Within: v.within.WithLabelValues(l...), Shadow: v.shadow.WithLabelValues(l...),
	}
}

// SetEnvoyKeys drops the series of the (domain, key) pairs in force before
// that keys does not hold, and keeps keys as the pairs in force: the
// series of a rule leave with it. The per-value series of a pair
// (EnvoyDetail) leave when detailed no longer holds it.
func (m *Metrics) SetEnvoyKeys(keys, detailed map[[2]string]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.envoy
	for k := range v.keys {
		if !keys[k] {
			v.delete(k[0], k[1])
		}
	}
	v.keys = keys
	for k, d := range v.details {
		if !detailed[k] {
			d.mu.Lock()
			for label := range d.values {
				v.delete(k[0], label)
			}
			d.values = nil
			d.mu.Unlock()
			delete(v.details, k)
		}
	}
}

func (v *envoyVecs) delete(domain, key string) {
	for _, vec := range [...]*prometheus.CounterVec{v.total, v.over, v.near, v.within, v.shadow} {
		vec.DeleteLabelValues(domain, key)
	}
}

// MaxDetailedValues bounds the per-value series of one descriptor key
// with detailed_metric: the first values seen get series of their own,
// the others count under the key.
const MaxDetailedValues = 100

// EnvoyDetail is the per-value statistics of one descriptor key with
// envoyproxy/ratelimit's detailed_metric: a series per descriptor value,
// for at most MaxDetailedValues values.
type EnvoyDetail struct {
	m      *Metrics
	domain string
	mu     sync.Mutex
	values map[string]*EnvoyStats // by key label; nil once dropped
}

// EnvoyDetail returns the per-value statistics of descriptor key in
// domain, the same across rules revisions while SetEnvoyKeys' detailed
// holds the pair.
func (m *Metrics) EnvoyDetail(domain, key string) *EnvoyDetail {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.envoy
	k := [2]string{domain, key}
	if d := v.details[k]; d != nil {
		return d
	}
	if v.details == nil {
		v.details = make(map[[2]string]*EnvoyDetail)
	}
	d := &EnvoyDetail{m: m, domain: domain, values: make(map[string]*EnvoyStats)}
	v.details[k] = d
	return d
}

// Stats returns the counters of label, a descriptor's key with its
// values; nil when the key has MaxDetailedValues series already (or was
// dropped), or label is not UTF-8 (which no Prometheus label may be): its
// hits then count under the key.
func (d *EnvoyDetail) Stats(label string) *EnvoyStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	if st := d.values[label]; st != nil || d.values == nil || len(d.values) >= MaxDetailedValues || !utf8.ValidString(label) {
		return st
	}
	st := d.m.EnvoyStats(d.domain, label)
	d.values[label] = st
	return st
}
