package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestMatchHeadersAndMethodSets: through the gateway, over real HTTP, a
// rule on a request header's value applies to the calls carrying that
// value (the header's name in any case), never to calls without it or
// with another value; a rule on a method set applies to each of its
// methods and to no other.
func TestMatchHeadersAndMethodSets(t *testing.T) {
	l := newLimiter(t, `
rules:
  - {id: acme, match: {headers: {x-tenant: acme}}, by: global, limit: 2, window: 1h}
  - {id: beta, match: {headers: {X-Tenant: "beta-*", X-Env: prod}}, by: global, limit: 1, window: 1h}
  - {id: writes, match: {endpoint: "PUT|DELETE /api/*"}, by: global, limit: 1, window: 1h}
`)
	up := newUpstream(t, nil)
	gw := newGateway(t, l, up.URL, nil)
	do := func(method, path string, h map[string]string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, gw.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range h {
			req.Header[k] = []string{v} // as written: the server makes the name canonical
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("RateLimit-Policy")
	}
	for i, s := range []struct {
		method, path string
		h            map[string]string
		want         int
		policy       string // the rule the answer names, "" for none
	}{
		{"GET", "/x", map[string]string{"X-Tenant": "acme"}, 200, `"acme"`},
		{"GET", "/y", map[string]string{"x-tenant": "acme"}, 200, `"acme"`},
		{"GET", "/z", map[string]string{"X-TENANT": "acme"}, 429, `"acme"`},
		{"GET", "/x", map[string]string{"X-Tenant": "Acme"}, 200, ""}, // values compare exactly
		{"GET", "/x", map[string]string{"X-Other": "acme"}, 200, ""},
		{"GET", "/x", nil, 200, ""},
		{"GET", "/x", map[string]string{"X-Tenant": "beta-1"}, 200, ""}, // no X-Env: prod
		{"GET", "/x", map[string]string{"X-Tenant": "beta-1", "X-Env": "prod"}, 200, `"beta"`},
		{"GET", "/x", map[string]string{"X-Tenant": "beta-2", "X-Env": "prod"}, 429, `"beta"`},
		{"PUT", "/api/a", nil, 200, `"writes"`},
		{"DELETE", "/api/b", nil, 429, `"writes"`},
		{"GET", "/api/a", nil, 200, ""},
		{"POST", "/api/a", nil, 200, ""},
	} {
		code, policy := do(s.method, s.path, s.h)
		if code != s.want || (policy == "") != (s.policy == "") || !strings.HasPrefix(policy, s.policy) {
			t.Errorf("step %d: %s %s %v = %d, RateLimit-Policy %q; want %d, %s", i, s.method, s.path, s.h, code, policy, s.want, s.policy)
		}
	}
}
