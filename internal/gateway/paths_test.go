package gateway_test

import (
	"net/http"
	"testing"
)

// send sends method target (a raw request target) to the gateway at base
// and returns the status.
func send(t *testing.T, base, method, target string) int {
	t.Helper()
	req, err := http.NewRequest(method, base, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.URL.Opaque = target // sent as written, not re-encoded or cleaned
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestHeadIsGet: once GET /api/orders has used its budget, 20 HEADs of it
// are all answered 429 and none reaches the upstream.
func TestHeadIsGet(t *testing.T) {
	up := newUpstream(t, nil)
	l := newLimiter(t, `
rules:
  - {id: orders, match: {endpoint: "GET /api/orders"}, by: ip, limit: 2, window: 1m}
`)
	gw := newGateway(t, l, up.URL, nil)
	for i := range 2 {
		if got := send(t, gw.URL, "GET", "/api/orders"); got != 200 {
			t.Fatalf("GET %d = %d, want 200", i+1, got)
		}
	}
	for i := range 20 {
		if got := send(t, gw.URL, "HEAD", "/api/orders"); got != http.StatusTooManyRequests {
			t.Errorf("HEAD %d after the GET budget = %d, want 429", i+1, got)
		}
	}
	if up.n != 2 {
		t.Errorf("the upstream got %d calls, want the 2 GETs", up.n)
	}
}

// TestPathsFold: every spelling of /api/orders is limited as /api/orders,
// with the same normaliser as the Envoy and decision APIs; a rule with
// path_case insensitive also takes other letter cases.
func TestPathsFold(t *testing.T) {
	up := newUpstream(t, nil)
	l := newLimiter(t, `
rules:
  - {id: orders, match: {endpoint: "GET /api/orders"}, by: ip, limit: 1, window: 1m}
  - {id: admin, match: {endpoint: "* /admin/*", path_case: insensitive}, by: ip, limit: 1, window: 1m}
`)
	gw := newGateway(t, l, up.URL, nil)
	if got := send(t, gw.URL, "GET", "/api/orders"); got != 200 {
		t.Fatalf("GET /api/orders = %d, want 200", got)
	}
	// ("//api/orders" is not among them: net/http reads a target that
	// starts with "//" as //host/path, and the upstream is sent "/orders".)
	for _, p := range []string{"/api/orders/", "/api//orders", "/api/./orders", "/api/x/../orders",
		"/api/%6frders", "/api%2Forders", "/api/orders;jsessionid=1", "/api/orders?page=2"} {
		if got := send(t, gw.URL, "GET", p); got != http.StatusTooManyRequests {
			t.Errorf("GET %s = %d, want 429 under orders", p, got)
		}
	}
	if got := send(t, gw.URL, "GET", "/admin/users"); got != 200 {
		t.Fatalf("GET /admin/users = %d, want 200", got)
	}
	for _, p := range []string{"/ADMIN/users", "/Admin/%55sers/"} {
		if got := send(t, gw.URL, "GET", p); got != http.StatusTooManyRequests {
			t.Errorf("GET %s = %d, want 429 under admin (path_case insensitive)", p, got)
		}
	}
}
