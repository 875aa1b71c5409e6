package rls_test

import (
	"fmt"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/envoyconf"
	"github.com/sluicehq/sluice/internal/testkit/rlstest"
)

// TestEnvoyUnlimitedZeroReplaces replays request sequences against
// rlstest.Features and checks each descriptor's status as
// envoyproxy/ratelimit answers it: an unlimited descriptor is OK with limit_remaining
// 4294967295 and no current_limit, and is not counted; requests_per_unit
// 0 is OVER_LIMIT with that limit; a replaced limit is not applied (OK, no
// current_limit) and not counted.
func TestEnvoyUnlimitedZeroReplaces(t *testing.T) {
	set, _, err := envoyconf.Load([]envoyconf.File{{Name: "feat.yaml", Data: []byte(rlstest.Features)}}, envoyconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	type want = rlstest.Status
	none, unl, lim := rlstest.NoLimit, rlstest.Unlimited, rlstest.Limited
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
			{d(desc("client", "internal"), desc("client", "acme")), []want{unl, lim(ok, 3, 2, "")}},
		}},
		{"no rate_limit: no limit, the key's limit does not apply", []step{
			{d(desc("client", "trusted")), []want{unl}},
			{d(desc("client", "trusted")), []want{unl}},
			{d(desc("client", "trusted")), []want{unl}},
			{d(desc("client", "trusted")), []want{unl}},
		}},
		{"requests_per_unit 0: every call over the limit", []step{
			{d(desc("client", "banned")), []want{lim(over, 0, 0, "")}},
			{d(desc("client", "banned")), []want{lim(over, 0, 0, "")}},
			// With another descriptor: the request is denied, and — where
			// sluice differs — acme's bucket gives nothing.
			{d(desc("client", "acme"), desc("client", "banned")), []want{lim(ok, 3, 2, ""), lim(over, 0, 0, "")}},
			{d(desc("client", "acme")), []want{lim(ok, 3, 2, "")}},
		}},
		{"replaces: the named limit is not applied nor counted", []step{
			{d(north), []want{lim(ok, 2, 1, "member_north")}},
			{d(north, south), []want{none, lim(ok, 4, 3, "")}},
			{d(north, south), []want{none, lim(ok, 4, 2, "")}},
			{d(north, south), []want{none, lim(ok, 4, 1, "")}},
			{d(north), []want{lim(ok, 2, 0, "member_north")}},
			{d(north), []want{lim(over, 2, 0, "member_north")}},
			{d(south, north), []want{lim(ok, 4, 0, ""), none}},
			{d(south, north), []want{lim(over, 4, 0, ""), none}},
		}},
		{"an unlimited descriptor replaces too", []step{
			{d(north), []want{lim(ok, 2, 1, "member_north")}},
			{d(desc("vip", "x"), north), []want{unl, none}},
			{d(desc("vip", "x"), north), []want{unl, none}},
			{d(north), []want{lim(ok, 2, 0, "member_north")}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, set)
			for i, s := range tt.steps {
				rlstest.CheckFeatures(t, fmt.Sprintf("step %d", i), e.call(t, request("feat", s.ds...)), s.want)
			}
		})
	}
}
