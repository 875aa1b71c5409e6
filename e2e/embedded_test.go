package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSeedScenario: limit 1, window 1s, burst 10, token_bucket lets 10 calls
// through at once, denies the 11th with retry_after_ms in (0, 1000] and the
// quota headers of docs/api.md, and lets exactly one more through a second later.
func TestSeedScenario(t *testing.T) {
	in := serve(t, filepath.Join(t.TempDir(), "rules.yaml"))
	in.putRule(t, map[string]any{"id": "seed", "limit": 1, "window": "1s", "burst": 10, "algorithm": "token_bucket"})
	call := map[string]any{"user": "alice", "endpoint": "GET /api/orders"}
	for i := 1; i <= 10; i++ {
		a, h := in.check(t, call)
		if !a.Allowed || a.Remaining != int64(10-i) || h.Get("X-RateLimit-Remaining") != strconv.Itoa(10-i) {
			t.Fatalf("call %d = %+v (X-RateLimit-Remaining %q), want allowed with %d left", i, a, h.Get("X-RateLimit-Remaining"), 10-i)
		}
	}
	a, h := in.check(t, call)
	if a.Allowed || a.RetryAfterMS <= 0 || a.RetryAfterMS > 1000 || *a.Rule != "seed" || *a.Client != "user:alice" {
		t.Fatalf("11th call = %+v, want denied with retry_after_ms in (0, 1000]", a)
	}
	reset, _ := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
	now := time.Now().Unix()
	for name, ok := range map[string]bool{
		"X-RateLimit-Limit":     h.Get("X-RateLimit-Limit") == "1",
		"X-RateLimit-Remaining": h.Get("X-RateLimit-Remaining") == "0",
		"X-RateLimit-Reset":     reset >= now+9 && reset <= now+11,
		"RateLimit-Policy":      h.Get("RateLimit-Policy") == `"seed";q=1;w=1`,
		"RateLimit":             strings.HasPrefix(h.Get("RateLimit"), `"seed";r=0;t=`),
		"Retry-After":           h.Get("Retry-After") == "1",
	} {
		if !ok {
			t.Errorf("header %s = %q, want it per docs/api.md (headers %v)", name, h.Get(name), h)
		}
	}
	time.Sleep(time.Duration(a.RetryAfterMS)*time.Millisecond + 20*time.Millisecond)
	if a, _ := in.check(t, call); !a.Allowed {
		t.Fatalf("a second later = %+v, want allowed", a)
	}
	if a, _ := in.check(t, call); a.Allowed {
		t.Fatalf("and at once again = %+v, want denied", a)
	}
}

// TestFixedWindowBoundaryBurst shows the fixed window's flaw and the sliding
// log's exactness: 5 calls just before a window boundary and 5 just after
// are all admitted by a fixed window of limit 5 (2× the limit within a
// fraction of a second), while a sliding log of the same limit admits 5.
func TestFixedWindowBoundaryBurst(t *testing.T) {
	in := serve(t, filepath.Join(t.TempDir(), "rules.yaml"))
	in.putRule(t, map[string]any{"id": "fixed", "limit": 5, "window": "2s", "algorithm": "fixed_window", "match": map[string]any{"endpoint": "GET /fixed"}})
	in.putRule(t, map[string]any{"id": "log", "limit": 5, "window": "2s", "algorithm": "sliding_log", "match": map[string]any{"endpoint": "GET /log"}})

	burst := func(endpoint string) int {
		n := 0
		for i := 0; i < 5; i++ {
			if a, _ := in.check(t, map[string]any{"user": "bob", "endpoint": endpoint}); a.Allowed {
				n++
			}
		}
		return n
	}
	// Aim at 150 ms before the next boundary of the 2 s windows (aligned to
	// the epoch). A machine too slow to place the first ten calls before the
	// boundary gets another try with a fresh client.
	var fixedBefore, fixedAfter, logBefore, logAfter int
	var span time.Duration
	for attempt := 0; ; attempt++ {
		now := time.Now()
		boundary := now.Truncate(2 * time.Second).Add(2 * time.Second)
		if boundary.Sub(now) < 400*time.Millisecond {
			boundary = boundary.Add(2 * time.Second)
		}
		time.Sleep(time.Until(boundary.Add(-150 * time.Millisecond)))
		start := time.Now()
		fixedBefore, logBefore = burst("GET /fixed"), burst("GET /log")
		if time.Now().Before(boundary) {
			time.Sleep(time.Until(boundary.Add(50 * time.Millisecond)))
			fixedAfter, logAfter = burst("GET /fixed"), burst("GET /log")
			span = time.Since(start)
			break
		}
		if attempt == 4 {
			t.Fatal("could not place 10 calls in the 150 ms before a window boundary in 5 tries")
		}
		time.Sleep(4 * time.Second) // let both buckets empty out
	}

	if fixedBefore+fixedAfter != 10 {
		t.Errorf("fixed_window admitted %d+%d calls in %v, want 10 (2× its limit across the boundary)", fixedBefore, fixedAfter, span)
	}
	if logBefore+logAfter != 5 {
		t.Errorf("sliding_log admitted %d+%d calls in %v, want 5 (never more than its limit in any window)", logBefore, logAfter, span)
	}
	t.Logf("in %v across a window boundary: fixed_window admitted %d, sliding_log %d (limit 5 per 2s)", span, fixedBefore+fixedAfter, logBefore+logAfter)
}

// TestChangesSurviveRestart: every admin API change is in the rules file and
// in force after a restart, with the same revision.
func TestChangesSurviveRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	in := serve(t, path)
	in.putRule(t, map[string]any{"id": "a", "limit": 3, "window": "1h"})
	in.putRule(t, map[string]any{"id": "b", "limit": 7, "window": "1m", "algorithm": "sliding_window", "match": map[string]any{"plan": "partner"}})
	in.putRule(t, map[string]any{"id": "a", "limit": 2, "window": "1h"}) // replace
	if resp := do(t, "PUT", in.admin+"/clients/api_key:k_live_42", map[string]any{"plan": "partner"}, nil); resp.StatusCode >= 300 {
		t.Fatalf("PUT client: %d", resp.StatusCode)
	}
	in.putRule(t, map[string]any{"id": "gone", "limit": 1, "window": "1s"})
	if resp := do(t, "DELETE", in.admin+"/rules/gone", nil, nil); resp.StatusCode >= 300 {
		t.Fatalf("DELETE: %d", resp.StatusCode)
	}
	var before, after map[string]any
	do(t, "GET", in.admin+"/rules", nil, &before)

	in.restart()
	do(t, "GET", in.admin+"/rules", nil, &after)
	if before["revision"] != after["revision"] || len(after["rules"].([]any)) != 2 {
		t.Fatalf("after restart GET /rules = %v, want %v", after, before)
	}
	// In force: limit 2 for a, and the partner plan for the registered key.
	in.check(t, map[string]any{"user": "carol"})
	in.check(t, map[string]any{"user": "carol"})
	if a, _ := in.check(t, map[string]any{"user": "carol"}); a.Allowed || *a.Rule != "a" {
		t.Fatalf("3rd call = %+v, want denied by a (limit 2)", a)
	}
	if a, _ := in.check(t, map[string]any{"api_key": "k_live_42"}); !a.Allowed || a.Limit != 2 {
		// both a (limit 2, 1 left) and b (7) apply to the partner key; a is most restrictive
		t.Fatalf("partner call = %+v", a)
	}
	var clients map[string]any
	do(t, "GET", in.admin+"/clients/api_key:k_live_42", nil, &clients)
	if clients["plan"] != "partner" {
		t.Fatalf("client after restart = %v, want plan partner", clients)
	}
}

// TestHandEditedRulesFile: a good hand edit is in force within a second; a
// broken one keeps the last good rules and is reported by /readyz.
func TestHandEditedRulesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	in := serve(t, path)
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("rules:\n  - id: edited\n    limit: 1\n    window: 1h\n")
	waitFor(t, 3*time.Second, func() bool {
		a, _ := in.check(t, map[string]any{"user": "dave"})
		return a.Rule != nil && *a.Rule == "edited"
	})
	write("rules:\n  - id: edited\n    limit: zero\n")
	var ready map[string]any
	waitFor(t, 3*time.Second, func() bool {
		do(t, "GET", in.data+"/readyz", nil, &ready)
		rs, _ := ready["rules"].(map[string]any)
		return rs != nil && rs["error"] != nil
	})
	if msg := ready["rules"].(map[string]any)["error"].(string); !strings.Contains(msg, "limit") {
		t.Errorf("readyz rules error = %q, want it to name limit", msg)
	}
	if a, _ := in.check(t, map[string]any{"user": "dave"}); a.Allowed || *a.Rule != "edited" {
		t.Fatalf("after a broken edit = %+v, want the last good rule still denying", a)
	}
}

func TestBadInput(t *testing.T) {
	in := serve(t, filepath.Join(t.TempDir(), "rules.yaml"))
	tests := []struct {
		url, method, body string
		status            int
		field             string
	}{
		{in.data + "/ratelimit/check", "POST", `{"user":`, 400, "JSON"},
		{in.data + "/ratelimit/check", "POST", `{"endpoint":"GET /x"}`, 400, "user"},
		{in.data + "/ratelimit/check", "POST", `{"user":"a","cost":0}`, 400, "cost"},
		{in.data + "/ratelimit/check", "POST", `{"user":"a","cost":-1}`, 400, "cost"},
		{in.data + "/ratelimit/check", "POST", `{"user":"a","cost":2.5}`, 400, "cost"},
		{in.data + "/ratelimit/check", "POST", `{"user":"a","endpoint":"/orders"}`, 400, "endpoint"},
		{in.data + "/ratelimit/check", "POST", `{"user":"` + strings.Repeat("x", 200<<10) + `"}`, 413, ""},
		{in.admin + "/rules/r", "PUT", `{"id":"r","limit":-1,"window":"1m"}`, 400, "limit"},
		{in.admin + "/rules/r", "PUT", `{"id":"r","limit":-5,"window":"1m"}`, 400, "limit"},
		{in.admin + "/rules/r", "PUT", `{"id":"r","limit":5,"window":"1m","algorithm":"fastest"}`, 400, "algorithm"},
		{in.admin + "/rules/r", "PUT", `{"id":"r","limit":5,"window":"1m","match":{"endpoint":"/login"}}`, 400, "endpoint"},
		{in.admin + "/rules/r", "PUT", `{"id":"r","limit":5,`, 400, "JSON"},
		{in.admin + "/rules/r", "PUT", `{"id":"r","limit":5,"window":"1m","colour":"red"}`, 400, "colour"},
		{in.admin + "/rules/r", "PUT", `{"id":"r","limit":5,"window":"1m","description":"` + strings.Repeat("x", 2<<20) + `"}`, 413, ""},
		{in.admin + "/rules/nope", "DELETE", ``, 404, ""},
	}
	for _, tt := range tests {
		var e map[string]any
		resp := do(t, tt.method, tt.url, tt.body, &e)
		msg, _ := e["message"].(string)
		if resp.StatusCode != tt.status || !strings.Contains(msg, tt.field) {
			t.Errorf("%s %s %.60q = %d %v, want %d naming %q", tt.method, tt.url, tt.body, resp.StatusCode, e, tt.status, tt.field)
		}
	}
	// Nothing half-applied: no rule r exists.
	if resp := do(t, "GET", in.admin+"/rules/r", nil, nil); resp.StatusCode != 404 {
		t.Errorf("GET /rules/r after only bad PUTs = %d, want 404", resp.StatusCode)
	}
}

func waitFor(t testing.TB, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
