package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/testkit/listentest"
)

// TestConsoleTopFromEnvoyAPI: a caller denied through the Envoy gRPC API
// shows in the console's top list, as one denied through the check API.
func TestConsoleTopFromEnvoyAPI(t *testing.T) {
	addr := listentest.FreeAddr(t)
	in := serve(t, filepath.Join(t.TempDir(), "rules.yaml"), "--grpc-listen", addr)
	in.putRule(t, map[string]any{"id": "per-user", "by": "user", "limit": 1, "window": "1h"})

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT, rlsv3.RateLimitResponse_OVER_LIMIT} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "mallory"}}}}})
		cancel()
		if err != nil || resp.OverallCode != want {
			t.Fatalf("call %d = %v, %v; want %v", i+1, resp, err, want)
		}
	}

	var top struct {
		Rules []struct {
			Rule    string `json:"rule"`
			Callers []struct {
				Caller  string `json:"caller"`
				Denials uint64 `json:"denials"`
			} `json:"callers"`
		} `json:"rules"`
	}
	if resp := do(t, "GET", in.admin+"/console/api/top", nil, &top); resp.StatusCode != 200 {
		t.Fatalf("GET /console/api/top: %d", resp.StatusCode)
	}
	if len(top.Rules) != 1 || top.Rules[0].Rule != "per-user" || len(top.Rules[0].Callers) != 1 ||
		top.Rules[0].Callers[0].Caller != "user:mallory" || top.Rules[0].Callers[0].Denials != 2 {
		t.Errorf("top list %+v, want per-user: user:mallory denied 2 times", top)
	}
}
