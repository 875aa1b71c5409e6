package rls_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/algorithm"
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
						resp := e.call(t, request("ai", cost))
						if want := i < 2 || charge == ""; charge != "" && (resp.OverallCode == ok) != want {
							t.Errorf("charge %d = %v, want OK %v", i+1, resp.OverallCode, want)
						}
					}
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
