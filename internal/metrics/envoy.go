package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// envoyVecs are envoyproxy/ratelimit's per-descriptor statistics, as
// Prometheus counters labelled by domain and descriptor key.
type envoyVecs struct {
	total, over, near, within, shadow *prometheus.CounterVec
	keys                              map[[2]string]bool // the (domain, key) pairs in force
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
// series of a rule leave with it.
func (m *Metrics) SetEnvoyKeys(keys map[[2]string]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.envoy
	for k := range v.keys {
		if !keys[k] {
			for _, vec := range [...]*prometheus.CounterVec{v.total, v.over, v.near, v.within, v.shadow} {
				vec.DeleteLabelValues(k[0], k[1])
			}
		}
	}
	v.keys = keys
}
