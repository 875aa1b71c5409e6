package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/testkit/listentest"
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
			if served := tokenQuota(call); served != 3 {
				t.Errorf("served %d of 6, want 3", served)
			}
		})
	}
}

// TestEnvoyChargeAfterResponseEnvoyFiles is TestEnvoyChargeAfterResponse
// with envoyproxy/ratelimit's own configuration, unchanged, served from its
// runtime directory (RUNTIME_ROOT, RUNTIME_SUBDIRECTORY): 10 an hour per
// user. With SLUICE_ENVOY_CHARGE_AFTER_RESPONSE=ai the domain's calls with
// a hits_addend above 0 are charges: 3 of 6 served, as
// envoyproxy/ratelimit serves them. Without it they are requests that do
// not fit and take nothing: 6 of 6.
func TestEnvoyChargeAfterResponseEnvoyFiles(t *testing.T) {
	// A fixed window of an hour is aligned to the hour: keep clear of it.
	if d := time.Until(time.Now().Truncate(time.Hour).Add(time.Hour)); d < time.Minute {
		time.Sleep(d + time.Second)
	}
	const conf = "domain: ai\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: hour\n      requests_per_unit: 10\n"
	for _, store := range []string{"embedded", "redis"} {
		for _, charge := range []string{"ai", ""} {
			t.Run(store+"/"+charge, func(t *testing.T) {
				root := t.TempDir()
				dir := filepath.Join(root, "ratelimit", "config")
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "ai.yaml"), []byte(conf), 0o644); err != nil {
					t.Fatal(err)
				}
				env := []string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "SLUICE_ENVOY_CHARGE_AFTER_RESPONSE=" + charge}
				data, grpcAddr := listentest.FreeAddr(t), listentest.FreeAddr(t)
				args := []string{"serve", "--listen", data, "--admin-listen", "127.0.0.1:0", "--grpc-listen", grpcAddr}
				if store == "redis" {
					args = append(args, "--redis", redistest.Start(t).Addr())
				}
				p := startProc(t, env, args...)
				p.waitHealthy(t, "http://"+data+"/healthz")
				conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				c := rlsv3.NewRateLimitServiceClient(conn)
				call := func(hits uint64) rlsv3.RateLimitResponse_Code {
					d := descriptor("user", "alice")
					d.HitsAddend = wrapperspb.UInt64(hits)
					resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
					if err != nil {
						t.Fatalf("%v\n%s", err, p.log)
					}
					return resp.OverallCode
				}
				served := tokenQuota(call)
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

// tokenQuota runs the token-quota scenario through call, which sends a
// descriptor of hits_addend hits: six times a check of 0 and, when it is
// OK, a charge of 4. It returns how many calls were served.
func tokenQuota(call func(hits uint64) rlsv3.RateLimitResponse_Code) int {
	served := 0
	for range 6 {
		if call(0) != rlsv3.RateLimitResponse_OK {
			continue
		}
		served++
		call(4)
	}
	return served
}
