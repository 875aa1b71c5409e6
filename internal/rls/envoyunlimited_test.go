package rls_test

import (
	"math"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/rules"
)

// An envoyproxy/ratelimit configuration written for this project with the
// features of its README's examples 3, 5 and 7 and of its example
// configuration: unlimited, requests_per_unit 0, a descriptor without
// rate_limit next to its key, name and replaces (also from an unlimited
// descriptor).
const envoyGate = `
domain: gate
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: client
    value: internal
    rate_limit: {unlimited: true}
  - key: client
    value: trusted
  - key: client
    value: banned
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: area
    value: north
    descriptors:
      - key: member
        value: kim
        rate_limit: {name: member_kim, unit: minute, requests_per_unit: 2}
  - key: area
    value: south
    descriptors:
      - key: member
        value: kim
        rate_limit:
          replaces: [{name: member_kim}]
          unit: minute
          requests_per_unit: 4
  - key: vip
    rate_limit:
      unlimited: true
      replaces: [{name: member_kim}]
`

// TestEnvoyUnlimitedZeroReplaces replays request sequences against
// envoyGate and checks each descriptor's status as envoyproxy/ratelimit
// answers it: an unlimited descriptor is OK with limit_remaining
// 4294967295 and no current_limit, and is not counted; requests_per_unit
// 0 is OVER_LIMIT with that limit; a replaced limit is not applied (OK, no
// current_limit) and not counted.
func TestEnvoyUnlimitedZeroReplaces(t *testing.T) {
	set, err := rules.ImportEnvoy([]rules.EnvoyFile{{Name: "gate.yaml", Data: []byte(envoyGate)}})
	if err != nil {
		t.Fatal(err)
	}
	const unlimited = math.MaxUint32
	type want struct {
		code      rlsv3.RateLimitResponse_Code
		limited   bool // a current_limit
		limit     uint32
		remaining uint32
		name      string
	}
	none := want{code: ok}
	unl := want{code: ok, remaining: unlimited}
	type step struct {
		ds   []*ratelimitv3.RateLimitDescriptor
		want []want
	}
	d := func(ds ...*ratelimitv3.RateLimitDescriptor) []*ratelimitv3.RateLimitDescriptor { return ds }
	north, south := desc("area", "north", "member", "kim"), desc("area", "south", "member", "kim")
	tests := []struct {
		name  string
		steps []step
	}{
		{"unlimited: OK, never counted, the key's limit does not apply", []step{
			{d(desc("client", "internal")), []want{unl}},
			{d(desc("client", "internal")), []want{unl}},
			{d(desc("client", "internal")), []want{unl}},
			{d(desc("client", "internal")), []want{unl}},
			{d(desc("client", "internal"), desc("client", "acme")), []want{unl, {ok, true, 3, 2, "gate.1"}}},
		}},
		{"no rate_limit: no limit, the key's limit does not apply", []step{
			{d(desc("client", "trusted")), []want{unl}},
			{d(desc("client", "trusted")), []want{unl}},
			{d(desc("client", "trusted")), []want{unl}},
			{d(desc("client", "trusted")), []want{unl}},
		}},
		{"requests_per_unit 0: every call over the limit", []step{
			{d(desc("client", "banned")), []want{{over, true, 0, 0, "gate.4"}}},
			{d(desc("client", "banned")), []want{{over, true, 0, 0, "gate.4"}}},
			// With another descriptor: the request is denied, and — where
			// sluice differs — acme's bucket gives nothing.
			{d(desc("client", "acme"), desc("client", "banned")), []want{{ok, true, 3, 2, "gate.1"}, {over, true, 0, 0, "gate.4"}}},
			{d(desc("client", "acme")), []want{{ok, true, 3, 2, "gate.1"}}},
		}},
		{"replaces: the named limit is not applied nor counted", []step{
			{d(north), []want{{ok, true, 2, 1, "member_kim"}}},
			{d(north, south), []want{none, {ok, true, 4, 3, "gate.6"}}},
			{d(north, south), []want{none, {ok, true, 4, 2, "gate.6"}}},
			{d(north, south), []want{none, {ok, true, 4, 1, "gate.6"}}},
			{d(north), []want{{ok, true, 2, 0, "member_kim"}}},
			{d(north), []want{{over, true, 2, 0, "member_kim"}}},
			{d(south, north), []want{{ok, true, 4, 0, "gate.6"}, none}},
			{d(south, north), []want{{over, true, 4, 0, "gate.6"}, none}},
		}},
		{"an unlimited descriptor replaces too", []step{
			{d(north), []want{{ok, true, 2, 1, "member_kim"}}},
			{d(desc("vip", "x"), north), []want{unl, none}},
			{d(desc("vip", "x"), north), []want{unl, none}},
			{d(north), []want{{ok, true, 2, 0, "member_kim"}}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, set)
			for i, s := range tt.steps {
				resp := e.call(t, request("gate", s.ds...))
				overall := ok
				for j, w := range s.want {
					if w.code == over {
						overall = over
					}
					st := resp.Statuses[j]
					cl := st.GetCurrentLimit()
					got := want{st.Code, cl != nil, cl.GetRequestsPerUnit(), st.LimitRemaining, cl.GetName()}
					if got != w {
						t.Errorf("step %d, descriptor %d: %+v, want %+v", i, j, got, w)
					}
					reset := st.GetDurationUntilReset().AsDuration()
					switch {
					case cl == nil && st.DurationUntilReset != nil:
						t.Errorf("step %d, descriptor %d: duration_until_reset %v without a limit", i, j, reset)
					case cl != nil && (cl.Unit != rlsv3.RateLimitResponse_RateLimit_MINUTE || reset <= 0 || reset > time.Minute):
						t.Errorf("step %d, descriptor %d: unit %v, duration_until_reset %v, want MINUTE and (0, 1m]", i, j, cl.Unit, reset)
					}
				}
				if resp.OverallCode != overall {
					t.Errorf("step %d: overall %v, want %v", i, resp.OverallCode, overall)
				}
			}
		})
	}
}
