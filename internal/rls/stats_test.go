package rls_test

import (
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/internal/envoyconf"
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
