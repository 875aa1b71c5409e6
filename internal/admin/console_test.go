package admin

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/console"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store/memory"
)

// newConsoleEnv serves the admin API with the console, over a real rules
// file and an embedded store.
func newConsoleEnv(t *testing.T, token string) (*env, *limiter.Limiter) {
	t.Helper()
	e, lim, _ := newConsole(t, token)
	return e, lim
}

// newConsole is newConsoleEnv, with the Console.
func newConsole(t *testing.T, token string) (*env, *limiter.Limiter, *Console) {
	t.Helper()
	st, err := memory.New(memory.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	lim := limiter.New(st, limiter.Config{})
	c := &Console{Limiter: lim, Hitters: console.NewHitters(0, nil), Instance: "127.0.0.1:9090",
		Store: func() map[string]any { return map[string]any{"kind": "memory"} }}
	e := newEnv(t, Config{Token: token, Listen: "127.0.0.1:9090", Console: c})
	lim.SetRules(e.src.Current())
	e.src.Subscribe(lim.SetRules)
	return e, lim, c
}

var consoleRoutes = []struct{ method, path, body string }{
	{"GET", "/console/api/now", ""},
	{"GET", "/console/api/top", ""},
	{"GET", "/console/api/revisions", ""},
	{"GET", "/console/api/diff?from=0&to=0", ""},
	{"POST", "/console/api/rollback?dry_run=true", `{"revision": 0}`},
	{"POST", "/console/logout", ""},
	{"POST", "/explain", `{"user": "alice"}`},
}

// TestConsoleGuard: the console's routes are refused to a foreign page
// (Origin), a rebinding name (Host), and a caller without the token or
// with a wrong one; the page itself and the login need no token.
func TestConsoleGuard(t *testing.T) {
	e, _ := newConsoleEnv(t, "alice:s3cret")
	all := append(consoleRoutes,
		struct{ method, path, body string }{"GET", "/console/", ""},
		struct{ method, path, body string }{"GET", "/console/static/console.js", ""},
		struct{ method, path, body string }{"POST", "/console/login", `{"token": "alice:s3cret"}`})
	for _, rt := range all {
		name := rt.method + " " + rt.path
		t.Run(name, func(t *testing.T) {
			auth := []string{"Authorization", "Bearer alice:s3cret"}
			for _, bad := range [][]string{
				append([]string{"Origin", "https://evil.example"}, auth...),
				append([]string{"Host", "rebind.evil.example:9090"}, auth...),
				append([]string{"Host", "rebind.evil.example", "Origin", "http://rebind.evil.example"}, auth...),
			} {
				if r := e.do(rt.method, rt.path, rt.body, bad...); r.status != 403 {
					t.Errorf("%s with %q: %d %s, want 403", name, bad, r.status, r.body)
				}
			}
			public := rt.path == "/console/" || strings.HasPrefix(rt.path, "/console/static/") || rt.path == "/console/login"
			for _, kv := range [][]string{nil, {"Authorization", "Bearer alice:wrong"}, {"Authorization", "Bearer s3cret"}} {
				r := e.do(rt.method, rt.path, rt.body, kv...)
				if public && r.status == 401 || !public && r.status != 401 {
					t.Errorf("%s with %q: %d %s, want 401 unless public", name, kv, r.status, r.body)
				}
			}
			if r := e.do(rt.method, rt.path, rt.body, auth...); r.status >= 400 {
				t.Errorf("%s with the token: %d %s, want success", name, r.status, r.body)
			}
		})
	}
}

// TestConsoleSession: the login cookie is Secure, HttpOnly and
// SameSite=Strict, stands for the token only from the console's own
// pages, and ends with logout.
func TestConsoleSession(t *testing.T) {
	e, _ := newConsoleEnv(t, "alice:s3cret,bob:hunter2")
	own := []string{"Origin", "http://127.0.0.1:9090", "Sec-Fetch-Site", "same-origin"}
	e.must(e.do("POST", "/console/login", `{"token": "alice:nope"}`, own...), 401)
	e.must(e.do("POST", "/console/login", `{"token": "alice:s3cret"}`, "Sec-Fetch-Site", "same-origin"), 403) // a browser without Origin
	e.must(e.do("POST", "/console/login", `{"token": "alice:s3cret"}`, "Content-Type", "application/x-www-form-urlencoded", "Origin", "http://127.0.0.1:9090"), 415)
	r := e.must(e.do("POST", "/console/login", `{"token": "alice:s3cret"}`, own...), 204)
	cookies := (&http.Response{Header: r.header}).Cookies()
	if len(cookies) != 1 || cookies[0].Name != SessionCookie || !cookies[0].Secure || !cookies[0].HttpOnly ||
		cookies[0].SameSite != http.SameSiteStrictMode || cookies[0].Value == "" || strings.Contains(cookies[0].Value, "s3cret") {
		t.Fatalf("login cookie = %+v, want one Secure HttpOnly SameSite=Strict session cookie not holding the token", cookies)
	}
	cookie := []string{"Cookie", SessionCookie + "=" + cookies[0].Value}
	e.must(e.do("GET", "/rules", "", append(cookie, "Sec-Fetch-Site", "same-origin")...), 200)
	e.must(e.do("GET", "/console/api/now", "", cookie...), 200)
	// Another origin of the same site (another port of 127.0.0.1) gets
	// the cookie sent by the browser, which says where the request is from.
	e.must(e.do("GET", "/rules", "", append(cookie, "Sec-Fetch-Site", "same-site")...), 403)
	e.must(e.do("GET", "/rules", "", append(cookie, "Sec-Fetch-Site", "cross-site")...), 403)
	e.must(e.do("POST", "/apply?dry_run=true", `{"rules":[]}`, append(cookie, "Sec-Fetch-Site", "same-site", "Origin", "http://127.0.0.1:8000")...), 403)
	e.must(e.do("POST", "/apply?dry_run=true", `{"rules":[]}`, cookie...), 403) // a write without Origin
	// A change made with the session is recorded as the token's name.
	e.must(e.do("PUT", "/rules/r1", `{"limit": 5, "window": "1m"}`, append(cookie, own...)...), 201)
	e.must(e.do("GET", "/rules", "", "Cookie", SessionCookie+"=forged"), 401)
	e.must(e.do("POST", "/console/logout", "", append(cookie, own...)...), 204)
	e.must(e.do("GET", "/rules", "", cookie...), 401)
}

// TestConsoleExplainAndRollback: POST /explain reads without taking, and a
// rollback over the rules file (which keeps no history) restores a
// revision this process had in force.
func TestConsoleExplainAndRollback(t *testing.T) {
	e, lim := newConsoleEnv(t, "")
	e.must(e.do("PUT", "/rules/per-user", `{"limit": 2, "window": "1m"}`), 201)
	req := limiter.Request{User: "alice", Method: "GET", Path: "/"}
	for range 2 {
		if _, err := lim.Check(t.Context(), &req); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		r := e.must(e.do("POST", "/explain", `{"user": "alice", "method": "GET", "path": "/"}`), 200)
		if !strings.Contains(r.String(), `"allowed":false`) || !strings.Contains(r.String(), `"bucket":"user:alice"`) {
			t.Fatalf("explain = %s, want denied on bucket user:alice", r.body)
		}
	}
	r := e.must(e.do("POST", "/explain", `{"api_key": "k_live_secret"}`), 200)
	if strings.Contains(r.String(), "k_live_secret") {
		t.Fatalf("explain shows the API key: %s", r.body)
	}
	e.must(e.do("POST", "/explain", `{"method": "GET"}`), 400)
	e.must(e.do("PUT", "/rules/per-user", `{"limit": 9, "window": "1m"}`), 200)
	if r := e.must(e.do("GET", "/console/api/diff?from=1&to=2", ""), 200); !strings.Contains(r.String(), `"op":"update"`) {
		t.Fatalf("diff = %s, want the update", r.body)
	}
	e.must(e.do("POST", "/console/api/rollback", `{"revision": 1}`, "If-Match", `"1"`), 412)
	e.must(e.do("POST", "/console/api/rollback", `{"revision": 1}`, "If-Match", `"2"`), 200)
	if c, _ := e.src.Current().Rule("per-user"); c.Limit != 2 || e.revision() != 3 {
		t.Fatalf("after rollback: limit %d revision %d, want 2 at 3", c.Limit, e.revision())
	}
	e.must(e.do("POST", "/console/api/rollback", `{"revision": 77}`), 404)
}
