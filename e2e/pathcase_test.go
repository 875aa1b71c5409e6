package e2e

import (
	"context"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestEndpointSpellingsShareOneBucket: a path_case insensitive rule keyed
// by the endpoint is one bucket for every spelling of its path, through
// the decision API, the Envoy API and the gateway alike (issue 27 §4: 36
// of 36, 8 of 8 and 36 of 36 calls passed a limit of 3 an hour).
func TestEndpointSpellingsShareOneBucket(t *testing.T) {
	const rulesYAML = `
rules:
  - {id: search, match: {endpoint: "GET /search", path_case: insensitive}, by: endpoint, limit: 3, window: 1h}
  - {id: find, match: {endpoint: "GET /find", path_case: insensitive}, by: endpoint, limit: 3, window: 1h}
`
	spell := func(base string, i int) string { // /search, /SEARCH, /Search, /sEARCH, …
		b := []byte(base)
		for j := 1; j < len(b); j++ {
			if i>>(j-1)&1 == 1 {
				b[j] -= 'a' - 'A'
			}
		}
		return string(b)
	}
	dir := t.TempDir()
	in, rls := serveEnvoy(t, dir, "fold", []byte(rulesYAML))

	allowed := 0
	for i := range 36 {
		if a, _ := in.check(t, map[string]any{"ip": "203.0.113.9", "endpoint": "GET " + spell("/search", i)}); a.Allowed {
			allowed++
		}
	}
	if allowed != 3 {
		t.Errorf("decision API: %d of 36 calls on spellings of /search allowed, want 3", allowed)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	allowed = 0
	for i := range 8 {
		resp, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "sluice",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", "203.0.113.9", "method", "GET", "path", spell("/find", i))}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode == rlsv3.RateLimitResponse_OK {
			allowed++
		}
	}
	if allowed != 3 {
		t.Errorf("Envoy API: %d of 8 calls on spellings of /find allowed, want 3", allowed)
	}

	up := newCountingUpstream(t, nil)
	gw := startGateway(t, writeRules(t, rulesYAML), up.URL)
	allowed = 0
	for i := range 36 {
		if c := gwDo(t, "GET", gw.url+spell("/search", i), nil); c.status == 200 {
			allowed++
		}
	}
	if allowed != 3 {
		t.Errorf("gateway: %d of 36 calls on spellings of /search passed, want 3", allowed)
	}
}
