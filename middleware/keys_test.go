package middleware_test

import (
	"net/http"
	"testing"

	"github.com/sluicehq/sluice/middleware"
)

// TestKeysOfAnyDimension: through the middleware, a rule keyed by a header
// has one bucket per value whoever calls, a global rule one bucket for
// every caller, and an endpoint rule one bucket per clean path, spelled
// any way (HEAD counted as GET).
func TestKeysOfAnyDimension(t *testing.T) {
	l := newLimiter(t, `
rules:
  - {id: tenant, match: {endpoint: "* /t/*"}, by: "header:x-tenant", limit: 1, window: 1m}
  - {id: search, match: {endpoint: "POST /search"}, by: global, limit: 2, window: 1m}
  - {id: per-path, match: {endpoint: "GET /p/*"}, by: endpoint, limit: 1, window: 1m}
`)
	h := middleware.Middleware(l)(&counter{})
	steps := []struct {
		c    call
		want int
	}{
		{call{path: "/t/a", remote: "192.0.2.1:1", header: map[string]string{"X-Tenant": "acme"}}, 200},
		{call{path: "/t/b", remote: "192.0.2.2:1", header: map[string]string{"x-tenant": "acme"}}, http.StatusTooManyRequests},
		{call{path: "/t/b", remote: "192.0.2.2:1", header: map[string]string{"x-tenant": "zeta"}}, 200},
		{call{path: "/t/b", remote: "192.0.2.2:1"}, 200}, // no tenant: not counted by the rule
		{call{method: "POST", path: "/search", remote: "192.0.2.3:1"}, 200},
		{call{method: "POST", path: "/search", remote: "192.0.2.4:1"}, 200},
		{call{method: "POST", path: "/search", remote: "192.0.2.5:1"}, http.StatusTooManyRequests},
		{call{path: "/p/x", remote: "192.0.2.6:1"}, 200},
		{call{path: "/p//x/", remote: "192.0.2.7:1"}, http.StatusTooManyRequests},
		{call{method: "HEAD", path: "/p/x", remote: "192.0.2.8:1"}, http.StatusTooManyRequests},
		{call{path: "/p/y", remote: "192.0.2.6:1"}, 200},
	}
	for i, s := range steps {
		if w := s.c.do(h); w.Code != s.want {
			t.Errorf("step %d (%s %s %v): %d, want %d", i, s.c.method, s.c.path, s.c.header, w.Code, s.want)
		}
	}
}
