package rls_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/envoyconf"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/rls"
	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/rules"
)

// TestEnvoyStatistics: the Envoy API counts envoyproxy/ratelimit's
// statistics per descriptor key — total, over limit, near limit, within
// limit, shadow mode, in hits — as Prometheus counters labelled by domain
// and the key as envoyproxy/ratelimit names it: one series per key of the
// configuration, whatever values the requests carry.
func TestEnvoyStatistics(t *testing.T) {
	set, _, err := envoyconf.Load([]envoyconf.File{{Name: "sms.yaml", Data: []byte(envoyConf)}}, envoyconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, set)
	// phone, 10 a day, near limit from 8 hits: 11 calls of 555, and one
	// call each of 20 other numbers.
	for range 11 {
		e.call(t, request("sms", desc("phone", "555")))
	}
	for i := range 20 {
		e.call(t, request("sms", desc("phone", strconv.Itoa(1000+i))))
	}
	// team/member trial, 1 a minute in shadow mode: 2 calls.
	for range 2 {
		e.call(t, request("sms", desc("team", "a", "member", "trial")))
	}
	for _, tt := range []struct {
		key                                string
		total, over, near, within, shadowM float64
	}{
		{"phone", 31, 1, 2, 30, 0},
		{"team.member_trial", 2, 1, 1, 1, 1}, // near from 0 hits (0.8 of 1, rounded down)
	} {
		l := map[string]string{"domain": "sms", "key": tt.key}
		got := [5]float64{
			counter(t, e, "sluice_envoy_total_hits_total", l), counter(t, e, "sluice_envoy_over_limit_total", l),
			counter(t, e, "sluice_envoy_near_limit_total", l), counter(t, e, "sluice_envoy_within_limit_total", l),
			counter(t, e, "sluice_envoy_shadow_mode_total", l),
		}
		if want := [5]float64{tt.total, tt.over, tt.near, tt.within, tt.shadowM}; got != want {
			t.Errorf("%s: total, over, near, within, shadow = %v, want %v", tt.key, got, want)
		}
	}
	if n := len(scrape(t, e)["sluice_envoy_total_hits_total"].GetMetric()); n != 6 {
		t.Errorf("sluice_envoy_total_hits_total has %d series, want 6 (one per limited descriptor key of the configuration)", n)
	}
}

// TestEnvoyDetailedMetric: a descriptor with detailed_metric: true counts
// its hits per descriptor value, labelled as envoyproxy/ratelimit names
// them (key_value), for the first metrics.MaxDetailedValues values; the
// others count under the descriptor key, so the series stay bounded
// whatever values callers send. A rule set without the setting drops the
// per-value series.
func TestEnvoyDetailedMetric(t *testing.T) {
	const conf = `domain: ai
descriptors:
  - key: tenant
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: model
    rate_limit: {unit: hour, requests_per_unit: 2}
`
	res, err := envoyconf.LoadResult([]envoyconf.File{{Name: "ai.yaml", Data: []byte(conf)}}, envoyconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, res.Set, func(c *rls.Config) {
		c.DetailedMetric = func(*rules.Index) map[string]bool { return res.DetailedMetric }
	})
	for range 3 {
		e.call(t, request("ai", desc("tenant", "acme")))
		e.call(t, request("ai", desc("model", "large")))
	}
	for i := range metrics.MaxDetailedValues + 5 {
		e.call(t, request("ai", desc("tenant", "t"+strconv.Itoa(i))))
	}
	for _, tt := range []struct {
		key               string
		total, over, with float64
	}{
		{"tenant_acme", 3, 1, 2},
		{"tenant_t0", 1, 0, 1},
		{"tenant", 6, 0, 6}, // the values past the bound: t99 to t104
		{"model", 3, 1, 2},  // no detailed_metric: no value in the label
	} {
		l := map[string]string{"domain": "ai", "key": tt.key}
		got := [3]float64{counter(t, e, "sluice_envoy_total_hits_total", l), counter(t, e, "sluice_envoy_over_limit_total", l),
			counter(t, e, "sluice_envoy_within_limit_total", l)}
		if want := [3]float64{tt.total, tt.over, tt.with}; got != want {
			t.Errorf("%s: total, over, within = %v, want %v", tt.key, got, want)
		}
	}
	// tenant, model, and 100 tenant values (acme and t0 to t98).
	if n := len(scrape(t, e)["sluice_envoy_total_hits_total"].GetMetric()); n != 2+metrics.MaxDetailedValues {
		t.Errorf("sluice_envoy_total_hits_total has %d series, want %d", n, 2+metrics.MaxDetailedValues)
	}
	// The same configuration without detailed_metric: its series go.
	res2, err := envoyconf.LoadResult([]envoyconf.File{{Name: "ai.yaml", Data: []byte(strings.Replace(conf, "detailed_metric: true", "detailed_metric: false", 1))}}, envoyconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res.DetailedMetric = res2.DetailedMetric
	e.srv.SetRules(limitertest.Compile(t, res2.Set))
	if n := len(scrape(t, e)["sluice_envoy_total_hits_total"].GetMetric()); n != 2 {
		t.Errorf("after detailed_metric went: %d series, want 2", n)
	}
}
