package e2e

import (
	"context"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// TestEnvoyChargeAfterResponse: envoyproxy/ratelimit's token-quota
// scenario through `sluice serve`'s Envoy API, on the embedded store and
// on Redis. Before each call a hits_addend 0 check, after it the call's
// real cost (4 tokens) as Envoy's apply_on_stream_done sends it, against
// 10 an hour on a rule with charge: after_response: the third charge goes
// into debt, and 3 of 6 calls are served.
func TestEnvoyChargeAfterResponse(t *testing.T) {
	rulesYAML := []byte("rules:\n  - {id: tokens, match: {domain: ai}, by: user, limit: 10, window: 1h, algorithm: token_bucket, charge: after_response}\n")
	for _, store := range []string{"embedded", "redis"} {
		t.Run(store, func(t *testing.T) {
			var extra []string
			if store == "redis" {
				extra = []string{"--redis", redistest.Start(t).Addr()}
			}
			_, c := serveEnvoy(t, t.TempDir(), store, rulesYAML, extra...)
			call := func(hits uint64) rlsv3.RateLimitResponse_Code {
				d := descriptor("user", "alice")
				d.HitsAddend = wrapperspb.UInt64(hits)
				resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
				if err != nil {
					t.Fatal(err)
				}
				return resp.OverallCode
			}
			served := 0
			for range 6 {
				if call(0) != rlsv3.RateLimitResponse_OK {
					continue
				}
				served++
				call(4)
			}
			if served != 3 {
				t.Errorf("served %d of 6, want 3", served)
			}
		})
	}
}
