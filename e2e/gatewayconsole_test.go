package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestGatewayConsole: `sluice gateway --admin-listen` serves the operator
// console under the admin API's guard and tokens — a foreign Origin, a
// DNS-rebinding Host, no token and a wrong one are refused on each of its
// routes — and its top list and explain see the gateway's own denials.
func TestGatewayConsole(t *testing.T) {
	const token = "ops:s3cret"
	up := newCountingUpstream(t, nil)
	gw := startGateway(t, writeRules(t, `rules:
  - id: per-ip
    limit: 1
    window: 1h
    by: ip
  - id: per-endpoint
    limit: 1
    window: 1h
    by: endpoint
    match: {endpoint: "GET /orders/*"}
`), up.URL, "--admin-token", token)
	for range 3 {
		gwDo(t, "GET", gw.url+"/orders/42", nil)
	}

	u, err := url.Parse(gw.admin)
	if err != nil {
		t.Fatal(err)
	}
	call := func(method, path, body string, h map[string]string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, gw.admin+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if method == "POST" {
			req.Header.Set("Content-Type", "application/json")
		}
		for k, v := range h {
			if k == "Host" {
				req.Host = v
				continue
			}
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	auth := "Bearer " + token
	routes := []struct{ method, path, body string }{
		{"GET", "/console/api/now", ""},
		{"GET", "/console/api/top", ""},
		{"GET", "/console/api/revisions", ""},
		{"GET", "/console/api/diff?from=0&to=0", ""},
		{"POST", "/console/api/rollback?dry_run=true", `{"revision": 0}`},
		{"POST", "/console/logout", ""},
		{"POST", "/explain", `{"ip": "127.0.0.1", "method": "GET", "path": "/orders/42"}`},
	}
	for _, rt := range routes {
		name := rt.method + " " + rt.path
		for _, bad := range []map[string]string{
			{"Authorization": auth, "Origin": "https://evil.example"},
			{"Authorization": auth, "Host": "rebind.evil.example:" + u.Port()},
		} {
			if st, body := call(rt.method, rt.path, rt.body, bad); st != 403 {
				t.Errorf("%s with %v: %d %s, want 403", name, bad, st, body)
			}
		}
		for _, h := range []map[string]string{nil, {"Authorization": "Bearer ops:wrong"}} {
			if st, body := call(rt.method, rt.path, rt.body, h); st != 401 {
				t.Errorf("%s with %v: %d %s, want 401", name, h, st, body)
			}
		}
		if st, body := call(rt.method, rt.path, rt.body, map[string]string{"Authorization": auth}); st >= 400 {
			t.Errorf("%s with the token: %d %s", name, st, body)
		}
	}
	if st, body := call("GET", "/console/", "", nil); st != 200 || !strings.Contains(body, "console") {
		t.Errorf("GET /console/: %d, want the page", st)
	}

	// The gateway's denials are in its top list, each by its bucket.
	st, body := call("GET", "/console/api/top", "", map[string]string{"Authorization": auth})
	var top struct {
		Rules []struct {
			Rule    string `json:"rule"`
			Callers []struct {
				Caller  string `json:"caller"`
				Denials uint64 `json:"denials"`
			} `json:"callers"`
		} `json:"rules"`
	}
	if err := json.Unmarshal([]byte(body), &top); st != 200 || err != nil {
		t.Fatalf("top: %d %s %v", st, body, err)
	}
	got := map[string]uint64{}
	for _, r := range top.Rules {
		for _, c := range r.Callers {
			got[r.Rule+" "+c.Caller] = c.Denials
		}
	}
	if got["per-ip ip:127.0.0.1"]+got["per-endpoint endpoint:GET /orders/42"] != 2 {
		t.Errorf("top list %s, want the 2 denials under per-ip ip:127.0.0.1 or per-endpoint endpoint:GET /orders/42", body)
	}
	if st, body := call("POST", "/explain", `{"ip": "127.0.0.1", "method": "GET", "path": "/orders/42"}`, map[string]string{"Authorization": auth}); st != 200 || !strings.Contains(body, `"allowed":false`) {
		t.Errorf("explain: %d %s, want a denial", st, body)
	}
	if st, body := call("GET", "/console/api/now", "", map[string]string{"Authorization": auth}); st != 200 || !strings.Contains(body, `"store"`) {
		t.Errorf("now: %d %s", st, body)
	}
}
