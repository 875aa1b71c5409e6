package gateway_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
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

// rawCall sends one raw request (line and headers) to the gateway at base
// and returns the answer's status.
func rawCall(t *testing.T, base, request string) int {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, request)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: %v", request, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestTargetIsWhatTheUpstreamGets: the limiter decides on exactly the
// path the upstream receives, and no target reaches the upstream outside
// --upstream's path prefix: an absolute-form target without a path is
// "/" for both; "." and ".." segments are resolved before either sees
// them; a target that is not a path, or has dot segments in another
// spelling an upstream may decode (%2e, "..;", %2F or %5C around dots),
// is refused with 400 and never reaches the upstream.
func TestTargetIsWhatTheUpstreamGets(t *testing.T) {
	up := newUpstream(t, nil)
	l := newLimiter(t, `
rules:
  - {id: root, match: {endpoint: "GET /"}, by: ip, limit: 1, window: 1m}
  - {id: admin, match: {endpoint: "GET /admin"}, by: ip, limit: 1, window: 1m}
`)
	gw := newGateway(t, l, up.URL+"/v1", nil)
	seen := func() string {
		up.mu.Lock()
		defer up.mu.Unlock()
		if up.last == nil {
			return ""
		}
		return up.last.RequestURI
	}
	for _, tt := range []struct {
		target, wantUp string
		want           int
	}{
		{"http://gw.example", "/v1/", 200},
		{"http://gw.example/", "/v1/", 429},
		{"/", "/v1/", 429},
		{"/../admin", "/v1/admin", 200},
		{"/admin", "/v1/admin", 429},
		{"/x/../admin", "/v1/admin", 429},
		{"/./admin/.", "/v1/admin/", 429},
	} {
		up.mu.Lock()
		up.last = nil
		up.mu.Unlock()
		if got := rawCall(t, gw.URL, "GET "+tt.target+" HTTP/1.1\r\nHost: gw.example\r\n\r\n"); got != tt.want {
			t.Errorf("GET %s = %d, want %d", tt.target, got, tt.want)
		}
		if tt.want == 200 {
			if got := seen(); got != tt.wantUp {
				t.Errorf("GET %s: the upstream got %q, want %q", tt.target, got, tt.wantUp)
			}
		}
	}
	for _, target := range []string{"http:admin/x", "/%2e%2e/admin", "/%2E./admin", "/..;/admin", "/x/..%2fadmin",
		"/x/..%5cadmin", "/.%2e;x/admin"} {
		// ("OPTIONS *" is answered by net/http's server itself.)
		before := up.n
		method := "GET"
		if got := rawCall(t, gw.URL, method+" "+target+" HTTP/1.1\r\nHost: gw.example\r\n\r\n"); got != http.StatusBadRequest {
			t.Errorf("%s %s = %d, want 400", method, target, got)
		}
		if up.n != before {
			t.Errorf("%s %s reached the upstream as %q", method, target, seen())
		}
	}
}
