package admin

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/adminclient"
	"github.com/sluicehq/sluice/internal/rls"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/limiter"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// TestExplainEnvoyRequestRedis: POST /explain takes a whole
// ShouldRateLimit request (domain, descriptors, hits_addend) and explains
// each descriptor's rules and buckets and the overall code as the Envoy
// API would decide them, over a real Redis, taking nothing: the Envoy
// API's own calls afterwards find the buckets as the one call before left
// them.
func TestExplainEnvoyRequestRedis(t *testing.T) {
	srv := redistest.Start(t)
	st, err := sredis.New(t.Context(), sredis.Config{Addrs: []string{srv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e0 := newEnv(t, Config{})
	envoy := rls.New(st, rls.Config{})
	envoy.SetRules(e0.src.Current())
	e0.src.Subscribe(envoy.SetRules)
	lim := limiter.New(st, limiter.Config{})
	lim.SetRules(e0.src.Current())
	e0.src.Subscribe(lim.SetRules)
	e := &env{t: t, h: New(e0.src, Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Console: &Console{Limiter: lim, Envoy: envoy}}), hdr: http.Header{}}
	e.must(e.do("PUT", "/rules/per-user", `{"limit": 3, "window": "1m"}`), 201)
	e.must(e.do("PUT", "/rules/checkout", `{"limit": 1, "window": "1m", "by": "entry:generic_key", "match": {"entries": [{"key": "generic_key"}]}}`), 201)

	shouldRateLimit := func(descs ...[]string) rlsv3.RateLimitResponse_Code {
		t.Helper()
		req := &rlsv3.RateLimitRequest{Domain: "edge"}
		for _, d := range descs {
			rd := &ratelimitv3.RateLimitDescriptor{}
			for i := 0; i < len(d); i += 2 {
				rd.Entries = append(rd.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: d[i], Value: d[i+1]})
			}
			req.Descriptors = append(req.Descriptors, rd)
		}
		resp, err := envoy.ShouldRateLimit(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode
	}
	alice, checkout := []string{"user", "alice"}, []string{"generic_key", "checkout"}
	if c := shouldRateLimit(alice, checkout); c != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first call: %v, want OK", c)
	}
	body := `{"domain": "edge", "hits_addend": 1, "descriptors": [
		{"entries": [{"key": "user", "value": "alice"}]},
		{"entries": [{"key": "generic_key", "value": "checkout"}]},
		{"entries": []}]}`
	for range 3 {
		r := e.must(e.do("POST", "/explain", body), 200)
		var ex adminclient.EnvoyExplanation
		if err := json.Unmarshal(r.body, &ex); err != nil {
			t.Fatal(err)
		}
		if ex.OverallCode != "OVER_LIMIT" || len(ex.Checks) != 3 {
			t.Fatalf("explain = %s, want OVER_LIMIT over 3 checks", r.body)
		}
		a, c, empty := ex.Checks[0], ex.Checks[1], ex.Checks[2]
		if a.Code != "OK" || len(a.Buckets) != 1 || a.Buckets[0].Bucket != "user:alice" || a.Buckets[0].Remaining != 2 {
			t.Errorf("descriptor 0 = %+v, want OK, user:alice at 2 of 3", a)
		}
		if c.Code != "OVER_LIMIT" || len(c.Buckets) != 1 || c.Decision.Rule != "checkout" {
			t.Errorf("descriptor 1 = %+v, want OVER_LIMIT by checkout, its only bucket (no user: per-user keys none)", c)
		}
		for _, b := range c.Buckets {
			if b.Rule == "checkout" && (b.Bucket != "entry:generic_key=checkout" || b.Remaining != 0) {
				t.Errorf("checkout's bucket = %+v, want entry:generic_key=checkout at 0", b)
			}
		}
		if !empty.Empty || empty.Code != "OK" || empty.Descriptors[0] != 2 {
			t.Errorf("descriptor 2 = %+v, want an empty OK", empty)
		}
	}
	// The explanations took nothing: alice has 2 left, as one call left her.
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if c := shouldRateLimit(alice); c != want {
			t.Fatalf("alice's call %d after explaining: %v, want %v", i+2, c, want)
		}
	}
	e.must(e.do("POST", "/explain", `{"domain": "edge", "user": "alice", "descriptors": [{"entries": [{"key": "user", "value": "alice"}]}]}`), 400)
	e.must(e.do("POST", "/explain", `{"domain": "edge", "descriptors": [{"entries": [{"key": "user", "value": "a"}], "limit": {"requests_per_unit": 1, "unit": "FORTNIGHT"}}]}`), 400)
	e.must(e.do("POST", "/explain", `{"domain": "", "descriptors": [{"entries": [{"key": "user", "value": "a"}]}]}`), 400)
}
