package admin

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/console"
	"github.com/sluicehq/sluice/internal/seam/descriptor"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
)

// TestConsoleTopNamesBuckets: a rule not keyed by a caller (global, the
// endpoint, a header) lists the bucket it limited as an operator
// recognises it — "global", the endpoint, the header's value — with that
// bucket's state, not one row without an id; a header that carries a
// credential shows only its fingerprint.
func TestConsoleTopNamesBuckets(t *testing.T) {
	e, lim, c := newConsole(t, "")
	for _, r := range []struct{ id, body string }{
		{"everyone", `{"limit": 1, "window": "1h", "by": "global", "match": {"endpoint": "POST /g"}}`},
		{"per-endpoint", `{"limit": 1, "window": "1h", "by": "endpoint", "match": {"endpoint": "GET /e/*"}}`},
		{"per-tenant", `{"limit": 1, "window": "1h", "by": "header:x-tenant", "match": {"endpoint": "GET /h"}}`},
		{"per-token", `{"limit": 1, "window": "1h", "by": "header:authorization", "match": {"endpoint": "GET /t"}}`},
		{"per-descriptor", `{"limit": 1, "window": "1h", "by": "entry:generic_key", "match": {"entries": [{"key": "generic_key"}]}}`},
	} {
		e.must(e.do("PUT", "/rules/"+r.id, r.body), 201)
	}
	// Denied as the check API and the Envoy API tell the console (OnDenied).
	feed := console.NewFeed(c.Hitters, limiter.Config{})
	denied := func(d *limiter.Decision, req *limiter.Request) { feed.Denied(lim, d, req) }
	for _, req := range []limiter.Request{
		{User: "alice", Method: "POST", Path: "/g"},
		{User: "bob", Method: "GET", Path: "/e/orders"},
		{User: "carol", Method: "GET", Path: "/h", Header: http.Header{"X-Tenant": {"acme"}}},
		{User: "dave", Method: "GET", Path: "/t", Header: http.Header{"Authorization": {"Bearer s3cret-token"}}},
		{IP: "203.0.113.9"}, // with an Envoy descriptor, below
	} {
		if req.IP == "203.0.113.9" {
			descriptor.Attach(&req, &descriptor.Descriptor{Entries: []rules.Entry{{Key: "generic_key", Value: "checkout"}}})
		}
		for range 3 {
			d, err := lim.Check(t.Context(), &req)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed {
				denied(&d, &req)
			}
		}
	}
	r := e.must(e.do("GET", "/console/api/top", ""), 200)
	if strings.Contains(r.String(), "s3cret-token") {
		t.Fatalf("top list shows a credential in clear: %s", r.body)
	}
	var top struct {
		Rules []struct {
			Rule    string      `json:"rule"`
			Callers []topCaller `json:"callers"`
		} `json:"rules"`
	}
	if err := json.Unmarshal(r.body, &top); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"everyone":       "global",
		"per-endpoint":   "endpoint:GET /e/orders",
		"per-tenant":     "header:x-tenant=acme",
		"per-token":      "header:authorization=#" + console.Fingerprint("Bearer s3cret-token"),
		"per-descriptor": "entry:generic_key=checkout",
	}
	for _, rt := range top.Rules {
		w, found := want[rt.Rule]
		if !found {
			continue
		}
		delete(want, rt.Rule)
		if len(rt.Callers) != 1 {
			t.Errorf("%s: callers %+v, want one, %s", rt.Rule, rt.Callers, w)
			continue
		}
		c := rt.Callers[0]
		if c.Caller != w || c.Denials != 2 || c.Limit != 1 || c.Remaining != 0 || c.State != "" {
			t.Errorf("%s: %+v, want %s denied 2 times, its bucket read: 0 of 1 remaining", rt.Rule, c, w)
		}
	}
	for rule, w := range want {
		t.Errorf("%s: not in the top list %s, want %s", rule, r.body, w)
	}
}
