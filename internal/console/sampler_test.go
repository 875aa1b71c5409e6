package console

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestSamplerRates(t *testing.T) {
	reg := prometheus.NewRegistry()
	dec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_decisions_total"}, []string{"rule", "outcome", "source"})
	lat := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_store_duration_seconds", Buckets: []float64{1e-3, 1e-2}}, []string{"store"})
	reg.MustRegister(dec, lat)
	s := NewSampler(reg)
	now := time.Unix(1_700_000_000, 0)
	s.now = func() time.Time { return now }
	for range 11 {
		s.Sample()
		dec.WithLabelValues("per-user", "allowed", "store").Add(100)
		dec.WithLabelValues("per-user", "denied", "local_denial_cache").Add(20)
		for range 9 {
			lat.WithLabelValues("memory").Observe(5e-4)
		}
		lat.WithLabelValues("memory").Observe(5e-3)
		now = now.Add(time.Second)
	}
	s.Sample()
	n := s.Now()
	if n.Allowed != 100 || n.Denied != 20 || len(n.Rules) != 1 || n.Rules[0].Denied != 20 {
		t.Fatalf("Now = %+v, want 100 allowed/s and 20 denied/s under per-user", n)
	}
	if n.LocalShare < 0.16 || n.LocalShare > 0.17 {
		t.Fatalf("LocalShare = %v, want 20/120", n.LocalShare)
	}
	if len(n.Latency) != 1 || n.Latency[0].P50 != 1 || n.Latency[0].P99 != 10 {
		t.Fatalf("Latency = %+v, want p50 ≤ 1 ms and p99 ≤ 10 ms", n.Latency)
	}
	if len(n.Series) != 11 {
		t.Fatalf("Series has %d points, want 11", len(n.Series))
	}
}
