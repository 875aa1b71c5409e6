package cli

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/rls"
	"github.com/sluicehq/sluice/internal/rulestore"
	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store/memory"
)

// TestRulesExplain: `sluice rules explain` prints the decision and each
// bucket, and explaining takes nothing from the caller's quota.
func TestRulesExplain(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	src, err := rulestore.OpenFile(rulestore.FileConfig{Path: filepath.Join(dir, "rules.yaml"), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	lim := limiter.New(limitertest.Store(t, memory.DefaultConfig()), limiter.Config{})
	lim.SetRules(src.Current())
	src.Subscribe(lim.SetRules)
	adm := httptest.NewServer(admin.New(src, admin.Config{Logger: log, Console: &admin.Console{Limiter: lim}}))
	t.Cleanup(adm.Close)
	a := "--admin=" + adm.URL

	f := writeFile(t, dir, "v1.yaml", "rules:\n  - id: orders\n    match: {endpoint: \"GET /orders\"}\n    limit: 2\n    window: 1m\n")
	if code, _, errOut := sluice(t, "", "rules", "apply", "-f", f, a); code != 0 {
		t.Fatalf("apply: %s", errOut)
	}
	req := limiter.Request{User: "alice", Method: "GET", Path: "/orders"}
	for range 2 {
		lim.Check(context.Background(), &req)
	}
	for range 2 {
		code, out, errOut := sluice(t, "", "rules", "explain", "--user", "alice", "--endpoint", "GET /orders", a)
		if code != 0 || !strings.HasPrefix(out, "DENIED by orders: rate_limited, retry in ") ||
			!strings.Contains(out, "orders  user:alice  0/2") {
			t.Fatalf("explain: exit %d\n%s\n%s\nwant DENIED by orders with bucket user:alice at 0/2", code, out, errOut)
		}
	}
	code, out, _ := sluice(t, "", "rules", "explain", "--user", "bob", "--endpoint", "GET /orders", a)
	if code != 0 || !strings.HasPrefix(out, "ALLOWED (tightest rule orders, 1 remaining)") {
		t.Fatalf("explain bob: exit %d\n%s", code, out)
	}
	if code, _, errOut := sluice(t, "", "rules", "explain", "--endpoint", "GET /orders", a); code != 1 || !strings.Contains(errOut, "give at least one") {
		t.Fatalf("explain without a caller: exit %d %s, want 1 naming the fields", code, errOut)
	}
	if code, _, errOut := sluice(t, "", "rules", "explain", "--user", "a", "--endpoint", "GET", a); code != 1 || !strings.Contains(errOut, "--endpoint") {
		t.Fatalf("explain --endpoint GET: exit %d %s, want 1 naming --endpoint", code, errOut)
	}
}

// TestRulesExplainEnvoyRequest: `sluice rules explain --domain
// --descriptor …` explains a whole Envoy request: the overall code and
// each descriptor's check.
func TestRulesExplainEnvoyRequest(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	src, err := rulestore.OpenFile(rulestore.FileConfig{Path: filepath.Join(dir, "rules.yaml"), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	st := limitertest.Store(t, memory.DefaultConfig())
	lim := limiter.New(st, limiter.Config{})
	lim.SetRules(src.Current())
	src.Subscribe(lim.SetRules)
	envoy := rls.New(st, rls.Config{})
	envoy.SetRules(src.Current())
	src.Subscribe(envoy.SetRules)
	adm := httptest.NewServer(admin.New(src, admin.Config{Logger: log, Console: &admin.Console{Limiter: lim, Envoy: envoy}}))
	t.Cleanup(adm.Close)
	a := "--admin=" + adm.URL
	f := writeFile(t, dir, "v1.yaml", "rules:\n  - id: checkout\n    by: entry:generic_key\n    match: {entries: [{key: generic_key}]}\n    limit: 1\n    window: 1m\n  - id: per-user\n    limit: 5\n    window: 1m\n")
	if code, _, errOut := sluice(t, "", "rules", "apply", "-f", f, a); code != 0 {
		t.Fatalf("apply: %s", errOut)
	}
	if _, err := envoy.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "generic_key", Value: "checkout"}}}}}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := sluice(t, "", "rules", "explain", "--domain", "edge", "--descriptor", "user=alice", "--descriptor", "generic_key=checkout", a)
	if code != 0 || !strings.HasPrefix(out, "OVER_LIMIT (domain edge, rules revision 1)") ||
		!strings.Contains(out, "descriptor 0: OK\nALLOWED (tightest rule per-user, 5 remaining)") ||
		!strings.Contains(out, "descriptor 1: OVER_LIMIT\nDENIED by checkout") ||
		!strings.Contains(out, "checkout  entry:generic_key=checkout  0/1") || strings.Contains(out, "revision 0") {
		t.Fatalf("explain: exit %d\n%s\n%s\nwant OVER_LIMIT, descriptor 0 OK, descriptor 1 denied by checkout", code, out, errOut)
	}
	// Quota mode: a quota descriptor over its limit is reported OVER_LIMIT
	// while the request passes on another quota descriptor (generic_key
	// "other" has its whole bucket); the explanation says so rather than
	// print OVER_LIMIT over ALLOWED unexplained.
	fq := writeFile(t, dir, "v2.yaml", "rules:\n  - id: checkout\n    by: entry:generic_key\n    match: {entries: [{key: generic_key}]}\n    limit: 1\n    window: 1m\n    quota: true\n  - id: per-user\n    limit: 5\n    window: 1m\n")
	if code, _, errOut := sluice(t, "", "rules", "apply", "-f", fq, a); code != 0 {
		t.Fatalf("apply: %s", errOut)
	}
	code, out, errOut = sluice(t, "", "rules", "explain", "--domain", "edge", "--descriptor", "user=alice", "--descriptor", "generic_key=checkout", "--descriptor", "generic_key=other", a)
	if code != 0 || !strings.HasPrefix(out, "OK (domain edge, rules revision 2)") ||
		!strings.Contains(out, "descriptor 1: OVER_LIMIT (a quota descriptor over its limit: reported, and the request passes on its other descriptors)\n") {
		t.Fatalf("explain, quota mode: exit %d\n%s\n%s\nwant OK, descriptor 1 OVER_LIMIT named a quota descriptor", code, out, errOut)
	}
	if code, _, errOut := sluice(t, "", "rules", "explain", "--descriptor", "user=alice", a); code != 1 || !strings.Contains(errOut, "--domain") {
		t.Fatalf("explain without --domain: exit %d %s, want 1 naming --domain", code, errOut)
	}
	if code, _, errOut := sluice(t, "", "rules", "explain", "--domain", "edge", "--descriptor", "user", a); code != 1 || !strings.Contains(errOut, "--descriptor") {
		t.Fatalf("explain --descriptor user: exit %d %s, want 1 naming --descriptor", code, errOut)
	}
}
