package cli

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/admin"
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
	if code != 0 || !strings.HasPrefix(out, "ALLOWED (tightest rule orders, 2 remaining)") {
		t.Fatalf("explain bob: exit %d\n%s", code, out)
	}
	if code, _, errOut := sluice(t, "", "rules", "explain", "--endpoint", "GET /orders", a); code != 1 || !strings.Contains(errOut, "give at least one") {
		t.Fatalf("explain without a caller: exit %d %s, want 1 naming the fields", code, errOut)
	}
	if code, _, errOut := sluice(t, "", "rules", "explain", "--user", "a", "--endpoint", "GET", a); code != 1 || !strings.Contains(errOut, "--endpoint") {
		t.Fatalf("explain --endpoint GET: exit %d %s, want 1 naming --endpoint", code, errOut)
	}
}
