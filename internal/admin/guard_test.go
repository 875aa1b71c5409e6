package admin

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// TestWebPageCannotApply is the cross-site attack: a page in the
// operator's browser POSTs {"rules":[]} to the default admin API (no
// token, 127.0.0.1:9090) as text/plain — a "simple" request a browser
// sends cross-origin without asking — and every rule was deleted. Each
// way a page can send it is refused, and the rules stay.
func TestWebPageCannotApply(t *testing.T) {
	e := newEnv(t, Config{})
	e.must(e.do("PUT", "/rules/keep", ruleA), 201)
	for _, tt := range []struct {
		name   string
		kv     []string
		status int
		code   string
	}{
		{"text/plain from evil.example", []string{"Content-Type", "text/plain", "Origin", "https://evil.example"}, 403, "forbidden"},
		{"text/plain without Origin", []string{"Content-Type", "text/plain;charset=UTF-8"}, 415, "unsupported_media_type"},
		{"form from evil.example", []string{"Content-Type", "application/x-www-form-urlencoded", "Origin", "https://evil.example"}, 403, "forbidden"},
		{"form without Origin", []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"},
		{"multipart without Origin", []string{"Content-Type", "multipart/form-data; boundary=x"}, 415, "unsupported_media_type"},
		{"no Content-Type", []string{"Content-Type", ""}, 415, "unsupported_media_type"},
		{"JSON from evil.example", []string{"Origin", "https://evil.example"}, 403, "forbidden"},
		{"JSON from a sandboxed page", []string{"Origin", "null"}, 403, "forbidden"},
		{"JSON from another port of localhost", []string{"Host", "localhost:9090", "Origin", "http://localhost:3000"}, 403, "forbidden"},
		{"JSON from https of the same host", []string{"Origin", "https://127.0.0.1:9090"}, 403, "forbidden"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do("POST", "/apply", `{"rules":[]}`, tt.kv...)
			if r.status != tt.status || r.json(t)["error"] != tt.code {
				t.Errorf("POST /apply: %d %s, want %d %s", r.status, r.body, tt.status, tt.code)
			}
			if _, ok := e.src.Current().Rule("keep"); !ok || e.revision() != 1 {
				t.Fatalf("POST /apply refused with %d, but the rules changed (revision %d)", r.status, e.revision())
			}
		})
	}
	// PUT and DELETE are held to the same rules.
	e.must(e.do("PUT", "/rules/keep", `{"limit": 1, "window": "1s"}`, "Content-Type", "text/plain"), 415)
	e.must(e.do("PUT", "/clients/user:bob", `{"plan": "pro"}`, "Content-Type", "text/plain"), 415)
	e.must(e.do("PUT", "/default_plan", `{"plan": "pro"}`, "Content-Type", "application/x-www-form-urlencoded"), 415)
	e.must(e.do("DELETE", "/rules/keep", "", "Content-Type", "text/plain"), 415)
	e.must(e.do("DELETE", "/rules/keep", "", "Origin", "https://evil.example"), 403)
	if _, ok := e.src.Current().Rule("keep"); !ok || e.revision() != 1 {
		t.Fatalf("a refused write changed the rules (revision %d)", e.revision())
	}
	// What the operator's tools send still works: JSON (with a charset or
	// not), no Origin, or the API's own origin.
	e.must(e.do("POST", "/apply?dry_run=true", `{"rules":[]}`, "Content-Type", "application/json; charset=utf-8"), 200)
	e.must(e.do("POST", "/apply?dry_run=true", `{"rules":[]}`, "Origin", "http://127.0.0.1:9090"), 200)
	e.must(e.do("POST", "/apply?dry_run=true", `{"rules":[]}`, "Host", "localhost", "Origin", "http://localhost"), 200)
	e.must(e.do("DELETE", "/rules/keep", ""), 200)
}

// TestDNSRebindingRefused is the DNS rebinding attack: a page whose name
// the attacker re-points at 127.0.0.1 talks to the admin API as its own
// origin, with its own name in Host. Reads and writes are refused, and
// nothing changes.
func TestDNSRebindingRefused(t *testing.T) {
	e := newEnv(t, Config{})
	e.must(e.do("PUT", "/clients/api_key:k-secret", `{"plan": "pro"}`), 201)
	evil := []string{"Host", "rebind.evil.example:9090", "Origin", "http://rebind.evil.example:9090"}
	for _, req := range []struct{ method, path, body string }{
		{"GET", "/rules", ""},
		{"PUT", "/rules/pwned", `{"limit": 1000000, "window": "1s"}`},
		{"GET", "/clients", ""},
		{"GET", "/clients/api_key:k-secret", ""},
		{"GET", "/history", ""},
		{"POST", "/apply", `{"rules":[]}`},
	} {
		for _, kv := range [][]string{evil, evil[:2], {"Host", "rebind.evil.example"}} {
			r := e.do(req.method, req.path, req.body, kv...)
			if r.status != 403 || r.json(t)["error"] != "forbidden" || strings.Contains(string(r.body), "k-secret") {
				t.Errorf("%s %s with %q: %d %s, want 403 forbidden", req.method, req.path, kv, r.status, r.body)
			}
		}
	}
	if _, ok := e.src.Current().Rule("pwned"); ok || e.revision() != 1 {
		t.Fatalf("a rebound request changed the rules (revision %d)", e.revision())
	}
}

// TestAllowedHostsAndOrigins: the names and origins the API answers to.
func TestAllowedHostsAndOrigins(t *testing.T) {
	e := newEnv(t, Config{Listen: "admin.internal:9090",
		AllowedHosts:   []string{"sluice-admin.example", " LB.Example. "},
		AllowedOrigins: []string{"https://console.example", "http://localhost:3000/"}})
	for _, tt := range []struct {
		host, origin string
		want         int
	}{
		{"127.0.0.1:9090", "", 200},
		{"127.0.0.2", "", 200},
		{"[::1]:9090", "", 200},
		{"localhost:9090", "", 200},
		{"LocalHost.:9090", "", 200},
		{"10.1.2.3:9090", "", 200},                    // an address: no DNS answer can point it elsewhere
		{"admin.internal:9090", "", 200},              // the listen address's name
		{"admin.internal:80", "", 200},                // behind a port mapping
		{"sluice-admin.example", "", 200},             // listed
		{"lb.example:443", "", 200},                   // listed, case and final dot aside
		{"", "", 200},                                 // HTTP/1.0 without Host
		{"evil.example", "", 403},                     //
		{"admin.internal.evil.example:9090", "", 403}, // a name that contains a good one
		{"localhost.evil.example", "", 403},           //
		{"127.0.0.1.nip.io:9090", "", 403},            // a name that resolves to loopback
		{"127.0.0.1:9090", "https://console.example", 200},
		{"127.0.0.1:9090", "HTTPS://Console.Example:443", 200},
		{"127.0.0.1:9090", "http://localhost:3000", 200},
		{"127.0.0.1:9090", "http://console.example", 403}, // another scheme
		{"127.0.0.1:9090", "https://console.example:8443", 403},
		{"127.0.0.1:9090", "http://127.0.0.1:9090", 200},    // its own
		{"127.0.0.1:9090", "http://127.0.0.1:9091", 403},    //
		{"[::1]:9090", "http://[::1]:9090", 200},            //
		{"admin.internal", "http://admin.internal:80", 200}, //
	} {
		kv := []string{"Host", tt.host}
		if tt.origin != "" {
			kv = append(kv, "Origin", tt.origin)
		}
		if r := e.do("GET", "/rules", "", kv...); r.status != tt.want {
			t.Errorf("GET /rules Host %q Origin %q: %d %s, want %d", tt.host, tt.origin, r.status, r.body, tt.want)
		}
	}
	// Two Origin headers are one too many.
	req := httptest.NewRequest("GET", "http://127.0.0.1:9090/rules", nil)
	req.Header.Add("Origin", "https://console.example")
	req.Header.Add("Origin", "https://evil.example")
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	if rec.Code != 403 {
		t.Errorf("two Origin headers: %d, want 403", rec.Code)
	}
}

// TestGuardBeforeToken: a refused Host or Origin is refused before the
// token is checked, and a good token does not open the API to a page.
func TestGuardBeforeToken(t *testing.T) {
	e := newEnv(t, Config{Token: "s3cret"})
	e.must(e.do("GET", "/rules", "", "Authorization", "Bearer s3cret", "Host", "rebind.evil.example"), 403)
	e.must(e.do("GET", "/rules", "", "Authorization", "Bearer s3cret", "Origin", "https://evil.example"), 403)
	e.must(e.do("PUT", "/rules/a", ruleA, "Authorization", "Bearer s3cret", "Content-Type", "text/plain"), 415)
	e.must(e.do("PUT", "/rules/a", ruleA, "Authorization", "Bearer s3cret"), 201)
}

func TestCheckAllowed(t *testing.T) {
	for _, tt := range []struct {
		hosts, origins []string
		want           string // in the error; "" for none
	}{
		{nil, nil, ""},
		{[]string{"gw-01", "sluice-admin.internal:9090"}, []string{"https://console.internal", "http://10.0.0.7:3000"}, ""},
		{[]string{""}, nil, "--admin-allowed-host"},
		{[]string{" "}, nil, "--admin-allowed-host"},
		{[]string{"*.internal"}, nil, "--admin-allowed-host"},
		{[]string{"http://gw-01"}, nil, "--admin-allowed-host"},
		{nil, []string{""}, "--admin-allowed-origin"},
		{nil, []string{"*"}, "--admin-allowed-origin"},
		{nil, []string{"null"}, "--admin-allowed-origin"},
		{nil, []string{"console.internal"}, "--admin-allowed-origin"},
		{nil, []string{"https://console.internal/app"}, "--admin-allowed-origin"},
		{nil, []string{"ftp://console.internal"}, "--admin-allowed-origin"},
		{nil, []string{"https://*.internal"}, "--admin-allowed-origin"},
	} {
		err := CheckAllowed(tt.hosts, tt.origins)
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("CheckAllowed(%q, %q) = %v, want an error naming %q", tt.hosts, tt.origins, err, tt.want)
		}
	}
}

// TestPprof: profiles are served only with Pprof, behind the token, and
// the command line never.
func TestPprof(t *testing.T) {
	off := newEnv(t, Config{})
	for _, p := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/cmdline"} {
		if r := off.do("GET", p, ""); r.status != 404 || !strings.Contains(string(r.body), "--pprof") {
			t.Errorf("without Pprof, GET %s: %d %s, want 404 naming --pprof", p, r.status, r.body)
		}
	}
	if r := off.do("GET", "/debug/pprof/cmdline", ""); !strings.Contains(string(r.body), "never served") {
		t.Errorf("without Pprof, GET /debug/pprof/cmdline: %s, want it said the command line is never served", r.body)
	}
	on := newEnv(t, Config{Pprof: true, Token: "s3cret"})
	on.must(on.do("GET", "/debug/pprof/heap", ""), 401)
	on.must(on.do("GET", "/debug/pprof/heap", "", "Host", "rebind.evil.example", "Authorization", "Bearer s3cret"), 403)
	if r := on.must(on.do("GET", "/debug/pprof/heap?debug=1", "", "Authorization", "Bearer s3cret"), 200); !strings.Contains(string(r.body), "heap profile") {
		t.Errorf("GET /debug/pprof/heap?debug=1 = %.200s, want a heap profile", r.body)
	}
	for _, p := range []string{"/debug/pprof/cmdline", "/debug/pprof/cmdline?x=1"} {
		r := on.do("GET", p, "", "Authorization", "Bearer s3cret")
		if r.status != 404 || strings.Contains(string(r.body), ".test") {
			t.Errorf("GET %s: %d %s, want 404 without the command line", p, r.status, r.body)
		}
	}
}
