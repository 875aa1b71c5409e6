package rls_test

import (
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/envoyconf"
	"github.com/sluicehq/sluice/rules"
)

// TestChargeAfterResponse is envoyproxy/ratelimit's token-quota scenario:
// before each call Envoy checks with hits_addend 0, after the response it
// sends the call's real cost (apply_on_stream_done, hits_addend from a
// header), here 4 tokens against 10 a minute. On a rule with charge:
// after_response the third charge goes into debt and every check after it
// is denied: 3 of 6 calls are served, as envoyproxy/ratelimit serves them.
// On a rule of requests (the default) a charge that does not fit takes
// nothing, so the budget never reads as spent: 6 of 6.
func TestChargeAfterResponse(t *testing.T) {
	for name, newStore := range stores(t) {
		for _, kind := range []algorithm.Kind{algorithm.FixedWindow, algorithm.TokenBucket, algorithm.LeakyBucket} {
			for _, charge := range []rules.Charge{rules.ChargeAfterResponse, ""} {
				t.Run(name+"/"+kind.String()+"/"+string(charge), func(t *testing.T) {
					var burst int64
					if kind == algorithm.LeakyBucket {
						burst = 9 // capacity 10, as the others
					}
					set := &rules.Set{Rules: []rules.Rule{{ID: "tokens", Limit: 10, Window: rules.Duration(time.Hour), Burst: burst,
						By: rules.ByUser, Algorithm: kind, Charge: charge}}}
					e := newEnvStore(t, set, name, newStore(t), nil)
					served := tokenQuota(t, e, func(i int, resp *rlsv3.RateLimitResponse) {
						if want := i < 2 || charge == ""; charge != "" && (resp.OverallCode == ok) != want {
							t.Errorf("charge %d = %v, want OK %v", i+1, resp.OverallCode, want)
						}
					})
					want := 3
					if charge == "" {
						want = 6
					}
					if served != want {
						t.Errorf("served %d of 6, want %d", served, want)
					}
				})
			}
		}
	}
}

// tokenQuotaConf is the token-quota scenario's limit in
// envoyproxy/ratelimit's own format: 10 tokens an hour per user.
const tokenQuotaConf = `domain: ai
descriptors:
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 10
`

// TestChargeAfterResponseEnvoyConf is TestChargeAfterResponse with the
// limit in envoyproxy/ratelimit's format, unchanged: the descriptors the
// setting --envoy-charge-after-response selects (here the domain, or its
// key) take their charges into debt, and 3 of 6 calls are served, as
// envoyproxy/ratelimit serves them; with no selector, or one that names
// no descriptor of the configuration (a value is the configuration's, not
// a call's), the calls are requests and 6 of 6 are served.
func TestChargeAfterResponseEnvoyConf(t *testing.T) {
	for name, newStore := range stores(t) {
		for _, tt := range []struct {
			sel  string
			want int
		}{{"ai", 3}, {"ai:user", 3}, {"", 6}, {"ai:user=alice", 6}, {"ai:tenant", 6}, {"other", 6}} {
			t.Run(name+"/"+tt.sel, func(t *testing.T) {
				var opt envoyconf.Options
				if tt.sel != "" {
					sel, err := envoyconf.ParseSelector(tt.sel)
					if err != nil {
						t.Fatal(err)
					}
					opt.ChargeAfterResponse = []envoyconf.Selector{sel}
				}
				set, _, err := envoyconf.Load([]envoyconf.File{{Name: "ai.yaml", Data: []byte(tokenQuotaConf)}}, opt)
				if err != nil {
					t.Fatal(err)
				}
				served := tokenQuota(t, newEnvStore(t, set, name, newStore(t), nil), nil)
				if served != tt.want {
					t.Errorf("served %d of 6, want %d", served, tt.want)
				}
			})
		}
	}
}

// tokenQuota runs the token-quota scenario on e, six times: user alice's
// check of 0 in domain ai and, when it is OK, her charge of 4, whose
// answer goes to charged (when set) with the round i. It returns how many
// calls were served.
func tokenQuota(t *testing.T, e *env, charged func(i int, resp *rlsv3.RateLimitResponse)) int {
	t.Helper()
	served := 0
	for i := range 6 {
		check := desc("user", "alice")
		check.HitsAddend = wrapperspb.UInt64(0)
		if e.call(t, request("ai", check)).OverallCode != ok {
			continue
		}
		served++
		cost := desc("user", "alice")
		cost.HitsAddend = wrapperspb.UInt64(4)
		if resp := e.call(t, request("ai", cost)); charged != nil {
			charged(i, resp)
		}
	}
	return served
}
