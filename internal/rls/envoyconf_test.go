package rls_test

import (
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/envoyconf"
	"github.com/sluicehq/sluice/store/memory"
)

// An envoyproxy/ratelimit configuration, written for this project with the
// features its README's examples use: nested descriptors with a
// placeholder, keys without a value (one bucket per value), a specific
// value next to its key, shadow_mode, a wildcard value, and two domains.
const envoyConf = `
domain: sms
descriptors:
  - key: kind
    value: promo
    descriptors:
      - key: phone
        rate_limit: {unit: day, requests_per_unit: 3}
  - key: phone
    rate_limit: {unit: day, requests_per_unit: 10}
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: remote_address
    value: 192.0.2.9
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: team
    descriptors:
      - key: member
        value: trial
        shadow_mode: true
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: route
    value: /v1/*
    rate_limit: {unit: hour, requests_per_unit: 2}
`

const envoyConf2 = `
domain: other
descriptors:
  - key: phone
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// TestEnvoyConfiguration replays request sequences against an imported
// envoyproxy/ratelimit configuration and checks, per descriptor, the code,
// the limit, limit_remaining and duration_until_reset.
func TestEnvoyConfiguration(t *testing.T) {
	set, _, err := envoyconf.Load([]envoyconf.File{{Name: "sms.yaml", Data: []byte(envoyConf)}, {Name: "other.yaml", Data: []byte(envoyConf2)}}, envoyconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		code      rlsv3.RateLimitResponse_Code
		limit     uint32 // 0: no current_limit
		remaining uint32
		unit      rlsv3.RateLimitResponse_RateLimit_Unit
	}
	type step struct {
		domain string
		ds     []*ratelimitv3.RateLimitDescriptor
		want   []want
	}
	day, sec, hour := rlsv3.RateLimitResponse_RateLimit_DAY, rlsv3.RateLimitResponse_RateLimit_SECOND, rlsv3.RateLimitResponse_RateLimit_HOUR
	promo := func(phone string) []*ratelimitv3.RateLimitDescriptor {
		return []*ratelimitv3.RateLimitDescriptor{desc("kind", "promo", "phone", phone), desc("phone", phone)}
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"nested and key-only, one status each", []step{
			{"sms", promo("555"), []want{{ok, 3, 2, day}, {ok, 10, 9, day}}},
			{"sms", promo("555"), []want{{ok, 3, 1, day}, {ok, 10, 8, day}}},
			{"sms", promo("555"), []want{{ok, 3, 0, day}, {ok, 10, 7, day}}},
			// Over the nested limit: the call is denied. The other
			// descriptor's status reads as envoyproxy/ratelimit's would
			// (what remains once this call is counted), but — where sluice
			// differs — the denied call took nothing from it: the next
			// call still finds 7 and leaves 6.
			{"sms", promo("555"), []want{{over, 3, 0, day}, {ok, 10, 6, day}}},
			{"sms", []*ratelimitv3.RateLimitDescriptor{desc("phone", "555")}, []want{{ok, 10, 6, day}}},
			{"sms", promo("777"), []want{{ok, 3, 2, day}, {ok, 10, 9, day}}}, // another value, other buckets
		}},
		{"a specific value beats its key", []step{
			{"sms", []*ratelimitv3.RateLimitDescriptor{desc("remote_address", "192.0.2.9")}, []want{{ok, 1, 0, sec}}},
			{"sms", []*ratelimitv3.RateLimitDescriptor{desc("remote_address", "192.0.2.9")}, []want{{over, 1, 0, sec}}},
			{"sms", []*ratelimitv3.RateLimitDescriptor{desc("remote_address", "192.0.2.10")}, []want{{ok, 4, 3, sec}}},
		}},
		{"placeholder and unknown descriptors have no limit", []step{
			{"sms", []*ratelimitv3.RateLimitDescriptor{desc("kind", "promo")}, []want{{ok, 0, 0, 0}}},
			{"sms", []*ratelimitv3.RateLimitDescriptor{desc("generic_key", "x")}, []want{{ok, 0, 0, 0}}},
			{"nope", []*ratelimitv3.RateLimitDescriptor{desc("phone", "555")}, []want{{ok, 0, 0, 0}}},
		}},
		{"shadow_mode never denies", []step{
			{"sms", []*ratelimitv3.RateLimitDescriptor{desc("team", "a", "member", "trial")}, []want{{ok, 1, 0, rlsv3.RateLimitResponse_RateLimit_MINUTE}}},
			{"sms", []*ratelimitv3.RateLimitDescriptor{desc("team", "a", "member", "trial")}, []want{{ok, 1, 0, rlsv3.RateLimitResponse_RateLimit_MINUTE}}},
		}},
		{"wildcard value: one bucket per value", []step{
			{"sms", []*ratelimitv3.RateLimitDescriptor{desc("route", "/v1/a")}, []want{{ok, 2, 1, hour}}},
			{"sms", []*ratelimitv3.RateLimitDescriptor{desc("route", "/v1/a")}, []want{{ok, 2, 0, hour}}},
			{"sms", []*ratelimitv3.RateLimitDescriptor{desc("route", "/v1/a")}, []want{{over, 2, 0, hour}}},
			{"sms", []*ratelimitv3.RateLimitDescriptor{desc("route", "/v1/b")}, []want{{ok, 2, 1, hour}}},
			{"sms", []*ratelimitv3.RateLimitDescriptor{desc("route", "/v2/a")}, []want{{ok, 0, 0, 0}}},
		}},
		{"domains are apart", []step{
			{"other", []*ratelimitv3.RateLimitDescriptor{desc("phone", "555")}, []want{{ok, 1, 0, rlsv3.RateLimitResponse_RateLimit_MINUTE}}},
			{"other", []*ratelimitv3.RateLimitDescriptor{desc("phone", "555")}, []want{{over, 1, 0, rlsv3.RateLimitResponse_RateLimit_MINUTE}}},
			{"sms", []*ratelimitv3.RateLimitDescriptor{desc("phone", "555")}, []want{{ok, 10, 9, day}}},
		}},
	}
	// The store's clock stands still: a limit of 1 a second is a fixed
	// window aligned to the second, which steps on the real clock could
	// cross between a call and the next.
	mc := memory.DefaultConfig()
	mc.Clock = func() int64 { return 1_777_777_777_500_000 } // half a second into a second
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnvOn(t, set, mc, nil)
			for i, s := range tt.steps {
				resp := e.call(t, request(s.domain, s.ds...))
				overall := ok
				for j, w := range s.want {
					st := resp.Statuses[j]
					if w.code == over {
						overall = over
					}
					cl := st.GetCurrentLimit()
					got := want{st.Code, cl.GetRequestsPerUnit(), st.LimitRemaining, cl.GetUnit()}
					if got != w {
						t.Errorf("step %d, descriptor %d: %+v, want %+v", i, j, got, w)
					}
					reset := st.GetDurationUntilReset().AsDuration()
					switch {
					case cl == nil && reset != 0:
						t.Errorf("step %d, descriptor %d: duration_until_reset %v without a limit", i, j, reset)
					case cl != nil && (reset <= 0 || reset > unitLength[w.unit]):
						t.Errorf("step %d, descriptor %d: duration_until_reset %v, want in (0, %v]", i, j, reset, unitLength[w.unit])
					}
				}
				if resp.OverallCode != overall {
					t.Errorf("step %d: overall %v, want %v", i, resp.OverallCode, overall)
				}
			}
		})
	}
}

var unitLength = map[rlsv3.RateLimitResponse_RateLimit_Unit]time.Duration{
	rlsv3.RateLimitResponse_RateLimit_SECOND: time.Second,
	rlsv3.RateLimitResponse_RateLimit_MINUTE: time.Minute,
	rlsv3.RateLimitResponse_RateLimit_HOUR:   time.Hour,
	rlsv3.RateLimitResponse_RateLimit_DAY:    24 * time.Hour,
}
