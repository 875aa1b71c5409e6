package rls_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/rls"
	"github.com/sluicehq/sluice/internal/rulestore"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/memory"
)

// reloadEnv is an RLS server on a loopback gRPC listener over a real
// memory store whose clock does not move, so that counts are exact; rule
// changes are put in force with SetRules, as the rules store does.
type reloadEnv struct {
	srv    *rls.Server
	client rlsv3.RateLimitServiceClient
}

func newReloadEnv(t *testing.T, set *rules.Set) *reloadEnv {
	t.Helper()
	e := startRLS(t, frozenStore(t))
	e.setRules(t, set)
	return e
}

// frozenStore returns a memory store whose clock stays at a whole hour, so
// that no window ends during a test.
func frozenStore(t *testing.T) *memory.Store {
	t.Helper()
	var clock atomic.Int64
	clock.Store(1_700_006_400_000_000)
	return limitertest.Store(t, memory.Config{Clock: clock.Load, SweepInterval: -1})
}

// startRLS serves an RLS server over st on a loopback gRPC listener, with
// no rules yet.
func startRLS(t *testing.T, st limiter.Store) *reloadEnv {
	t.Helper()
	e := &reloadEnv{srv: rls.New(st, rls.Config{})}
	conn := dial(t, serveGRPC(t, e.srv))
	e.client = rlsv3.NewRateLimitServiceClient(conn)
	return e
}

func (e *reloadEnv) setRules(t *testing.T, set *rules.Set) {
	t.Helper()
	e.srv.SetRules(limitertest.Compile(t, set))
}

func (e *reloadEnv) call(t *testing.T, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	return shouldRateLimit(t, e.client, req)
}

// wantAllowed makes n calls of req and fails the test, naming what, unless
// want were OK.
func (e *reloadEnv) wantAllowed(t *testing.T, req *rlsv3.RateLimitRequest, n, want int, what string) {
	t.Helper()
	if got := e.allowed(t, req, n); got != want {
		t.Fatalf("%s: %d of %d OK, want %d", what, got, n, want)
	}
}

// allowed makes n calls of req and reports how many were OK.
func (e *reloadEnv) allowed(t *testing.T, req *rlsv3.RateLimitRequest, n int) int {
	t.Helper()
	got := 0
	for range n {
		if e.call(t, req).OverallCode == ok {
			got++
		}
	}
	return got
}

// fixedWindow is a rule of limit calls an hour, counted in fixed windows:
// counts are kept across a rule change, so the numbers are exact.
func fixedWindow(id, domain, endpoint string, limit int64) rules.Rule {
	return rules.Rule{ID: id, Match: rules.Match{Domain: domain, Endpoint: endpoint}, Limit: limit,
		Window: rules.Duration(time.Hour), Algorithm: algorithm.FixedWindow}
}

// TestRuleChangesApplyToShouldRateLimit: a rule change decides the next
// ShouldRateLimit, on buckets that already exist, with no time passing: a
// raised limit lets more calls through, a lowered one is over the limit, a
// removed rule stops limiting, a new one starts; current_limit names the
// rule in force.
func TestRuleChangesApplyToShouldRateLimit(t *testing.T) {
	req := request("edge", desc("user", "alice", "method", "GET", "path", "/api/orders"))

	t.Run("raised", func(t *testing.T) {
		e := newReloadEnv(t, &rules.Set{Revision: 1, Rules: []rules.Rule{fixedWindow("r", "", "", 2)}})
		e.wantAllowed(t, req, 3, 2, "under limit 2")
		e.setRules(t, &rules.Set{Revision: 2, Rules: []rules.Rule{fixedWindow("r", "", "", 5)}})
		resp := e.call(t, req)
		st := resp.Statuses[0]
		if resp.OverallCode != ok || st.LimitRemaining != 2 || st.CurrentLimit.GetRequestsPerUnit() != 5 {
			t.Fatalf("raised to 5 after 2 calls = %v, want OK, 2 remaining, current_limit 5 per hour", resp)
		}
		e.wantAllowed(t, req, 3, 2, "then, under the raised limit")
	})
	t.Run("lowered", func(t *testing.T) {
		e := newReloadEnv(t, &rules.Set{Revision: 1, Rules: []rules.Rule{fixedWindow("r", "", "", 5)}})
		e.wantAllowed(t, req, 2, 2, "under limit 5")
		e.setRules(t, &rules.Set{Revision: 2, Rules: []rules.Rule{fixedWindow("r", "", "", 2)}})
		resp := e.call(t, req)
		if resp.OverallCode != over || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 2 {
			t.Fatalf("lowered to 2 after 2 calls = %v, want OVER_LIMIT, current_limit 2 per hour", resp)
		}
	})
	t.Run("removed", func(t *testing.T) {
		e := newReloadEnv(t, &rules.Set{Revision: 1, Rules: []rules.Rule{fixedWindow("r", "", "", 1)}})
		e.wantAllowed(t, req, 2, 1, "under limit 1")
		e.setRules(t, &rules.Set{Revision: 2})
		resp := e.call(t, req)
		if resp.OverallCode != ok || resp.Statuses[0].CurrentLimit != nil || len(resp.ResponseHeadersToAdd) != 0 {
			t.Fatalf("after the rule's removal = %v, want OK without a limit or headers", resp)
		}
	})
	t.Run("added", func(t *testing.T) {
		e := newReloadEnv(t, &rules.Set{Revision: 1})
		e.wantAllowed(t, req, 3, 3, "with no rules")
		e.setRules(t, &rules.Set{Revision: 2, Rules: []rules.Rule{fixedWindow("orders", "", "GET /api/orders", 1)}})
		e.wantAllowed(t, req, 3, 1, "after adding orders (limit 1)")
		if resp := e.call(t, req); resp.OverallCode != over || resp.Statuses[0].CurrentLimit.GetName() != "orders" {
			t.Fatalf("next call = %v, want OVER_LIMIT under orders", resp)
		}
	})
}

// TestRuleChangesReachEveryDomain: the server keeps one view of the rules
// per domain; a change reaches each of them — a domain's edited rule, a
// domain the change introduces, a domain it empties (which falls back to
// the rules with no domain) — in its decisions and its current_limit, also
// for requests whose descriptors are decided each on its own.
func TestRuleChangesReachEveryDomain(t *testing.T) {
	alice := desc("user", "alice", "method", "GET", "path", "/api/orders")
	bob := desc("user", "bob", "method", "GET", "path", "/api/orders")
	e := newReloadEnv(t, &rules.Set{Revision: 1, Rules: []rules.Rule{
		fixedWindow("edge-orders", "edge", "", 2),
		fixedWindow("root", "", "", 100),
	}})
	e.wantAllowed(t, request("edge", alice), 3, 2, "edge under edge-orders (limit 2)")
	e.wantAllowed(t, request("internal", alice), 2, 2, "internal under root (limit 100)")

	// Revision 2: edge-orders raised to 4, a new domain "internal" with a
	// limit of 3, which already has 2 calls counted against root but none
	// against its own rule.
	e.setRules(t, &rules.Set{Revision: 2, Rules: []rules.Rule{
		fixedWindow("edge-orders", "edge", "", 4),
		fixedWindow("internal-orders", "internal", "", 3),
		fixedWindow("root", "", "", 100),
	}})
	resp := e.call(t, request("edge", alice))
	if st := resp.Statuses[0]; resp.OverallCode != ok || st.CurrentLimit.GetName() != "edge-orders" || st.CurrentLimit.GetRequestsPerUnit() != 4 || st.LimitRemaining != 1 {
		t.Fatalf("edge after raising edge-orders to 4 = %v, want OK under edge-orders, 4 per hour, 1 remaining", resp)
	}
	e.wantAllowed(t, request("internal", alice), 4, 3, "internal under its new internal-orders (limit 3)")
	resp = e.call(t, request("internal", alice))
	if st := resp.Statuses[0]; resp.OverallCode != over || st.CurrentLimit.GetName() != "internal-orders" || st.CurrentLimit.GetRequestsPerUnit() != 3 {
		t.Fatalf("internal, next call = %v, want OVER_LIMIT under internal-orders, 3 per hour", resp)
	}
	// Two descriptors that disagree (two users) are decided each on its
	// own, with the domain's rules in force: alice takes her 4th call of 4,
	// bob his first.
	resp = e.call(t, request("edge", alice, bob))
	if a, b := resp.Statuses[0], resp.Statuses[1]; resp.OverallCode != ok || a.Code != ok || b.Code != ok ||
		a.LimitRemaining != 0 || b.LimitRemaining != 3 || b.CurrentLimit.GetRequestsPerUnit() != 4 {
		t.Fatalf("edge, alice and bob = %v, want both OK, alice with 0 and bob with 3 of 4 remaining", resp)
	}

	// Revision 3: edge's only rule is lowered to 1, internal loses its
	// rule and falls back to root.
	e.setRules(t, &rules.Set{Revision: 3, Rules: []rules.Rule{
		fixedWindow("edge-orders", "edge", "", 1),
		fixedWindow("root", "", "", 100),
	}})
	resp = e.call(t, request("edge", bob))
	if st := resp.Statuses[0]; resp.OverallCode != over || st.CurrentLimit.GetRequestsPerUnit() != 1 {
		t.Fatalf("edge, bob's 2nd call after lowering edge-orders to 1 = %v, want OVER_LIMIT at 1 per hour", resp)
	}
	// root has counted the 9 calls of alice allowed in both domains; this
	// is her 10th.
	resp = e.call(t, request("internal", alice))
	if st := resp.Statuses[0]; resp.OverallCode != ok || st.CurrentLimit.GetName() != "root" || st.LimitRemaining != 90 {
		t.Fatalf("internal after removing internal-orders = %v, want OK under root with 90 of 100 remaining", resp)
	}
}

// TestOneLimitAcrossRuleChange: a caller has one limit whichever API asks,
// before and after a rule change. The Envoy API and POST /ratelimit/check
// decide over one store and follow one rules file, each subscribed to it
// as sluice serve wires them; the calls alternate between the two.
func TestOneLimitAcrossRuleChange(t *testing.T) {
	src, err := rulestore.OpenFile(rulestore.FileConfig{
		Path:   filepath.Join(t.TempDir(), "rules.yaml"),
		Logger: slog.New(slog.DiscardHandler),
		Tick:   func(time.Duration) (<-chan time.Time, func()) { return nil, func() {} },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	setLimit := func(limit int64) {
		t.Helper()
		_, err := src.Update(context.Background(), -1, func(s *rules.Set) error {
			s.Rules = []rules.Rule{fixedWindow("orders", "", "GET /api/orders", limit)}
			return nil
		})
		if err != nil {
			t.Fatalf("Update(orders limit %d): %v", limit, err)
		}
	}
	setLimit(2)

	st := frozenStore(t)
	lim := limiter.New(st, limiter.Config{})
	lim.SetRules(src.Current())
	src.Subscribe(lim.SetRules)
	e := startRLS(t, st)
	e.srv.SetRules(src.Current())
	src.Subscribe(e.srv.SetRules)
	hs := httptest.NewServer(server.New(lim, server.Config{}))
	t.Cleanup(hs.Close)

	grpcOK := func() bool {
		t.Helper()
		return e.call(t, request("edge", desc("user", "alice", "method", "GET", "path", "/api/orders"))).OverallCode == ok
	}
	httpOK := func() bool {
		t.Helper()
		resp, err := http.Post(hs.URL+"/ratelimit/check", "application/json",
			strings.NewReader(`{"user":"alice","endpoint":"GET /api/orders"}`))
		if err != nil {
			t.Fatalf("POST /ratelimit/check: %v", err)
		}
		defer resp.Body.Close()
		var a struct {
			Allowed bool `json:"allowed"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("POST /ratelimit/check: status %d, decode error %v; want 200 and an answer", resp.StatusCode, err)
		}
		return a.Allowed
	}
	// got runs the calls (true: gRPC, false: HTTP) and says which passed.
	got := func(apis ...bool) []bool {
		t.Helper()
		var out []bool
		for _, viaGRPC := range apis {
			if viaGRPC {
				out = append(out, grpcOK())
			} else {
				out = append(out, httpOK())
			}
		}
		return out
	}
	const viaGRPC, viaHTTP = true, false

	if r := got(viaGRPC, viaHTTP, viaGRPC, viaHTTP); !slices.Equal(r, []bool{true, true, false, false}) {
		t.Fatalf("limit 2, gRPC, HTTP, gRPC, HTTP passed %v, want the first two only", r)
	}
	setLimit(4)
	if r := got(viaHTTP, viaGRPC, viaHTTP, viaGRPC); !slices.Equal(r, []bool{true, true, false, false}) {
		t.Fatalf("raised to 4, HTTP, gRPC, HTTP, gRPC passed %v, want the first two only", r)
	}
	setLimit(3)
	if r := got(viaHTTP, viaGRPC); !slices.Equal(r, []bool{false, false}) {
		t.Fatalf("lowered to 3 after 4 calls, HTTP and gRPC passed %v, want neither", r)
	}
	setLimit(6)
	if r := got(viaGRPC, viaHTTP, viaGRPC); !slices.Equal(r, []bool{true, true, false}) {
		t.Fatalf("raised to 6 after 4 calls, gRPC, HTTP, gRPC passed %v, want the first two only", r)
	}
}
