package limiter_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/seam/descriptor"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
)

// TestKeys: each kind of key makes the buckets it names — one for every
// caller (global), one per endpoint, header value, descriptor entry value
// or combination — and a call lacking a value its rule is keyed by is not
// counted by that rule.
func TestKeys(t *testing.T) {
	by := func(b rules.By) func(*rules.Rule) { return func(r *rules.Rule) { r.By = b } }
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	type call struct {
		req     limiter.Request
		allowed bool
		matched int
	}
	tests := []struct {
		name  string
		rule  rules.Rule
		calls []call
	}{
		{"global: one bucket for every caller", rule("g", 2, time.Minute, by(rules.ByGlobal)), []call{
			{limiter.Request{User: "a"}, true, 1},
			{limiter.Request{APIKey: "k"}, true, 1},
			{limiter.Request{IP: "203.0.113.7"}, false, 1},
			{limiter.Request{}, false, 1}, // no identity at all: still the one bucket
		}},
		{"endpoint: one bucket per method and path", rule("e", 1, time.Minute, func(r *rules.Rule) {
			r.By, r.Match.Endpoint = rules.ByEndpoint, "* /api/*"
		}), []call{
			{limiter.Request{User: "a", Method: "GET", Path: "/api/a"}, true, 1},
			{limiter.Request{User: "b", Method: "GET", Path: "/api/a"}, false, 1},
			{limiter.Request{User: "b", Method: "POST", Path: "/api/a"}, true, 1},
			{limiter.Request{User: "b", Method: "GET", Path: "/api/b"}, true, 1},
		}},
		{"header: one bucket per value; absent is not counted", rule("h", 1, time.Minute, by("header:X-Tenant")), []call{
			{limiter.Request{User: "a", Header: hdr("x-tenant", "acme")}, true, 1},
			{limiter.Request{User: "b", Header: hdr("X-TENANT", "acme")}, false, 1},
			{limiter.Request{User: "b", Header: hdr("x-tenant", "other")}, true, 1},
			{limiter.Request{User: "b", Header: hdr("x-other", "acme")}, true, 0},
			{limiter.Request{User: "b"}, true, 0},
		}},
		{"entry: one bucket per value", rule("n", 1, time.Minute, by("entry:generic_key")), []call{
			{withEntries(limiter.Request{}, []rules.Entry{{Key: "generic_key", Value: "x"}}), true, 1},
			{withEntries(limiter.Request{}, []rules.Entry{{Key: "generic_key", Value: "x"}}), false, 1},
			{withEntries(limiter.Request{}, []rules.Entry{{Key: "generic_key", Value: "y"}}), true, 1},
			{withEntries(limiter.Request{}, []rules.Entry{{Key: "other", Value: "x"}}), true, 0},
		}},
		{"api_key × endpoint", rule("ke", 1, time.Minute, by("api_key+endpoint")), []call{
			{limiter.Request{APIKey: "k1", Method: "GET", Path: "/a"}, true, 1},
			{limiter.Request{APIKey: "k1", Method: "GET", Path: "/a"}, false, 1},
			{limiter.Request{APIKey: "k1", Method: "GET", Path: "/b"}, true, 1},
			{limiter.Request{APIKey: "k2", Method: "GET", Path: "/a"}, true, 1},
			{limiter.Request{User: "u", Method: "GET", Path: "/a"}, true, 0}, // no API key
		}},
		{"combinations never collide", rule("hh", 1, time.Minute, by("header:a+header:b")), []call{
			{limiter.Request{Header: hdr("a", "x|header:b=y", "b", "z")}, true, 1},
			{limiter.Request{Header: hdr("a", "x", "b", "y|header:b=z")}, true, 1},
			{limiter.Request{Header: hdr("a", "x", "b", "y")}, true, 1},
			{limiter.Request{Header: hdr("a", "x", "b", "y")}, false, 1},
		}},
		{"long values by digest, still one bucket each", rule("long", 1, time.Minute, by("header:a+entry:e")), []call{
			{withEntries(limiter.Request{Header: hdr("a", string(make([]byte, 5000)))}, []rules.Entry{{Key: "e", Value: "1"}}), true, 1},
			{withEntries(limiter.Request{Header: hdr("a", string(make([]byte, 5000)))}, []rules.Entry{{Key: "e", Value: "1"}}), false, 1},
			{withEntries(limiter.Request{Header: hdr("a", string(make([]byte, 5001)))}, []rules.Entry{{Key: "e", Value: "1"}}), true, 1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, _ := newLimiter(t, &rules.Set{Rules: []rules.Rule{tt.rule}, Clients: registered("k", "k1", "k2")})
			for i, c := range tt.calls {
				d := check(t, l, c.req)
				if d.Allowed != c.allowed || d.Matched != c.matched {
					t.Errorf("call %d: allowed %v, matched %d; want %v, %d", i, d.Allowed, d.Matched, c.allowed, c.matched)
				}
			}
		})
	}
}

// TestKeysOfOneCall: rules of one call keyed alike share the key's value
// and no more — each keeps its own bucket, rules on other headers or
// parts read their own values, and the next call builds its own.
func TestKeysOfOneCall(t *testing.T) {
	keyed := func(id string, limit int64, by rules.By) rules.Rule {
		return rule(id, limit, time.Minute, func(r *rules.Rule) { r.By = by })
	}
	l, _ := newLimiter(t, &rules.Set{Rules: []rules.Rule{
		keyed("ep2", 2, rules.ByEndpoint),
		keyed("ep3", 3, rules.ByEndpoint),
		keyed("key-ep", 1, "api_key+endpoint"),
		keyed("a", 1, "header:x-a"),
		keyed("b", 1, "header:x-b"),
	}, Clients: registered("k1", "k2", "k3", "k9")})
	call := func(key, method, path, a, b string) limiter.Request {
		return limiter.Request{APIKey: key, Method: method, Path: path, Header: http.Header{"X-A": {a}, "X-B": {b}}}
	}
	for i, c := range []struct {
		req    limiter.Request
		denier string // "" allowed
	}{
		{call("k1", "GET", "/a", "1", "1"), ""},
		{call("k2", "GET", "/a", "2", "2"), ""},
		{call("k3", "get", "/a/", "3", "3"), "ep2"}, // GET /a a third time: ep2 is spent, ep3 is not
		{call("k1", "GET", "/b", "4", "4"), ""},     // another endpoint
		{call("k1", "GET", "/b", "5", "5"), "key-ep"},
		{call("k9", "POST", "/c", "1", "6"), "a"},
		{call("k9", "POST", "/c", "6", "1"), "b"},
		{call("k9", "POST", "/c", "7", "7"), ""},
	} {
		d := check(t, l, c.req)
		got := ""
		if !d.Allowed {
			got = d.RuleID()
		}
		if got != c.denier {
			t.Errorf("call %d (%s %s, x-a %s, x-b %s): denied by %q, want %q", i, c.req.Method, c.req.Path, c.req.Header.Get("x-a"), c.req.Header.Get("x-b"), got, c.denier)
		}
	}
}

// TestKeysRuleOnEntries: a rule on descriptor entries applies only to a
// request carrying exactly those entries, keyed as its by says.
func TestKeysRuleOnEntries(t *testing.T) {
	l, _ := newLimiter(t, &rules.Set{Rules: []rules.Rule{{
		ID: "tenant-path", Match: rules.Match{Entries: []rules.Entry{{Key: "tenant", Value: ""}, {Key: "path", Value: "/slow"}}},
		By: "entry:tenant", Limit: 1, Window: rules.Duration(time.Minute), Algorithm: 2,
	}}})
	e := func(kv ...string) []rules.Entry {
		var es []rules.Entry
		for i := 0; i < len(kv); i += 2 {
			es = append(es, rules.Entry{Key: kv[i], Value: kv[i+1]})
		}
		return es
	}
	for i, c := range []struct {
		entries []rules.Entry
		allowed bool
		matched int
	}{
		{e("tenant", "a", "path", "/slow"), true, 1},
		{e("tenant", "a", "path", "/slow"), false, 1},
		{e("tenant", "b", "path", "/slow"), true, 1},
		{e("tenant", "a", "path", "/fast"), true, 0},
		{e("tenant", "a"), true, 0},
	} {
		d := check(t, l, withEntries(limiter.Request{}, c.entries))
		if d.Allowed != c.allowed || d.Matched != c.matched {
			t.Errorf("call %d (%v): allowed %v, matched %d; want %v, %d", i, c.entries, d.Allowed, d.Matched, c.allowed, c.matched)
		}
	}
}

// BenchmarkCheckMixed is BenchmarkCheck over 10,000 rules of every kind of
// match and key: plans, endpoints, method sets, request headers (exact
// values, prefixes, two headers), Envoy descriptor entries, and rules
// keyed by the caller, global, endpoint, a header, an entry and
// api_key+endpoint. The HTTP call matches a global rule, an
// api_key+endpoint rule, a header-keyed rule, a method-set rule and two
// rules on headers; the Envoy call a rule on entries keyed by one of them.
func BenchmarkCheckMixed(b *testing.B) {
	s := &rules.Set{}
	keys := []rules.By{"", rules.ByGlobal, rules.ByEndpoint, "header:x-tenant", "api_key+endpoint"}
	for i := range 10_000 {
		r := rule(fmt.Sprintf("r%d", i), 1_000_000_000, time.Hour, nil)
		switch i % 8 {
		case 0:
			r.Match.Endpoint = fmt.Sprintf("GET /api/v1/resource%d", i)
		case 1:
			r.Match.Plan = fmt.Sprintf("plan%d", i)
		case 2:
			r.Match.Endpoint = fmt.Sprintf("* /api/v2/area%d/*", i)
		case 3:
			r.Match.Entries = []rules.Entry{{Key: "tenant"}, {Key: "route", Value: fmt.Sprintf("/r%d", i)}}
			r.By = "entry:tenant"
		case 4:
			r.Match.Endpoint = fmt.Sprintf("PUT|PATCH|DELETE /api/v3/item%d/*", i)
		case 5:
			r.Match.Headers = map[string]string{"X-Tenant": fmt.Sprintf("t%d", i)}
		case 6:
			r.Match.Headers = map[string]string{"X-Tenant": fmt.Sprintf("t%d", i), "X-Env": "prod-*"}
			r.Match.Endpoint = "* /api/*"
		default:
			r.Match.Headers = map[string]string{"X-Client-Version": fmt.Sprintf("%d.*", i)}
		}
		if r.By == "" {
			r.By = keys[i%len(keys)]
		}
		s.Rules = append(s.Rules, r)
	}
	// What the calls match: r0 … r7 are one of each kind.
	s.Rules[8].Match.Endpoint, s.Rules[8].By = "POST /search", rules.ByGlobal
	s.Rules[16].Match.Endpoint, s.Rules[16].By = "* /search", "api_key+endpoint"
	s.Rules[24].Match.Endpoint, s.Rules[24].By = "POST /*", "header:x-tenant"
	s.Rules[32].Match.Endpoint = "POST|PUT /search"
	s.Rules[5].Match.Headers = map[string]string{"X-Tenant": "acme"}
	s.Rules[7].Match.Headers = map[string]string{"X-Client-Version": "2.*"}
	s.Clients = registered("k_live_42") // an unregistered key is no caller
	for _, c := range []struct {
		name     string
		req      limiter.Request
		matching int
	}{
		{"http", limiter.Request{APIKey: "k_live_42", Method: "POST", Path: "/search",
			Header: http.Header{"X-Tenant": {"acme"}, "X-Env": {"prod-eu"}, "X-Client-Version": {"2.4.1"}}}, 6},
		{"envoy", withEntries(limiter.Request{}, []rules.Entry{{Key: "tenant", Value: "acme"}, {Key: "route", Value: "/r3"}}), 1},
	} {
		b.Run(c.name, func(b *testing.B) {
			l, _ := newLimiter(b, s)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				req := c.req
				d, err := l.Check(ctx, &req)
				if err != nil || d.Matched != c.matching {
					b.Fatalf("Check = %+v, %v; want %d rules matched", d, err, c.matching)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

// TestMatchHeaderAndMethodSet: a rule on a header's value counts only the
// calls carrying it (a call without headers, as the decision API makes,
// never), and a rule on a method set counts each of its methods in one
// bucket.
func TestMatchHeaderAndMethodSet(t *testing.T) {
	l, _ := newLimiter(t, &rules.Set{Rules: []rules.Rule{
		rule("acme", 1, time.Minute, func(r *rules.Rule) {
			r.Match.Headers, r.By = map[string]string{"x-tenant": "acme"}, rules.ByGlobal
		}),
		rule("writes", 1, time.Minute, func(r *rules.Rule) {
			r.Match.Endpoint, r.By = "PUT|DELETE /api/*", rules.ByGlobal
		}),
	}})
	for i, c := range []struct {
		req     limiter.Request
		allowed bool
		rule    string
	}{
		{limiter.Request{User: "a", Header: http.Header{"X-Tenant": {"other"}}}, true, ""},
		{limiter.Request{User: "a"}, true, ""},
		{limiter.Request{User: "a", Header: http.Header{"X-Tenant": {"acme"}}}, true, "acme"},
		{limiter.Request{User: "b", Header: http.Header{"X-Tenant": {"acme"}}}, false, "acme"},
		{limiter.Request{User: "a", Method: "PUT", Path: "/api/x"}, true, "writes"},
		{limiter.Request{User: "b", Method: "delete", Path: "/api//y"}, false, "writes"},
		{limiter.Request{User: "b", Method: "GET", Path: "/api/y"}, true, ""},
	} {
		d := check(t, l, c.req)
		if d.Allowed != c.allowed || d.RuleID() != c.rule {
			t.Errorf("call %d: allowed %v, rule %q; want %v, %q", i, d.Allowed, d.RuleID(), c.allowed, c.rule)
		}
	}
}

// TestEndpointKeyFoldsPathCase: a path_case insensitive rule keyed by the
// endpoint counts every spelling of one path in one bucket, alone or
// combined with another part, and a case-sensitive rule keyed alike in the
// same call keeps a bucket per spelling (issue 27 §4).
func TestEndpointKeyFoldsPathCase(t *testing.T) {
	insensitive := func(id string, limit int64, by rules.By) rules.Rule {
		return rule(id, limit, time.Hour, func(r *rules.Rule) {
			r.By, r.Match.Endpoint, r.Match.PathCase = by, "GET /search", rules.PathCaseInsensitive
		})
	}
	spellings := []string{"/search", "/SEARCH", "/Search", "/sEaRcH", "/SEARCH/", "//search"}
	for _, by := range []rules.By{rules.ByEndpoint, "api_key+endpoint", "endpoint+header:x-t"} {
		t.Run(string(by), func(t *testing.T) {
			l, _ := newLimiter(t, &rules.Set{Rules: []rules.Rule{insensitive("s", 3, by)}, Clients: registered("k")})
			allowed := 0
			for i := range 36 {
				d := check(t, l, limiter.Request{APIKey: "k", Method: "GET", Path: spellings[i%len(spellings)], Header: http.Header{"X-T": {"t"}}})
				if d.Matched != 1 {
					t.Fatalf("call %d: matched %d rules, want 1", i, d.Matched)
				}
				if d.Allowed {
					allowed++
				}
			}
			if allowed != 3 {
				t.Errorf("36 calls on %d spellings of /search: %d allowed, want 3", len(spellings), allowed)
			}
		})
	}
	t.Run("beside a case-sensitive rule", func(t *testing.T) {
		l, _ := newLimiter(t, &rules.Set{Rules: []rules.Rule{
			insensitive("fold", 2, rules.ByEndpoint),
			rule("exact", 1, time.Hour, func(r *rules.Rule) { r.By, r.Match.Endpoint = rules.ByEndpoint, "GET /*" }),
		}})
		for i, c := range []struct{ path, denier string }{
			{"/search", ""},
			{"/SEARCH", ""},      // its own exact bucket; the second of fold
			{"/Search", "fold"},  // fold is spent
			{"/search", "exact"}, // exact's /search is spent too (and fold)
		} {
			d := check(t, l, limiter.Request{Method: "GET", Path: c.path})
			got := ""
			if !d.Allowed {
				got = d.RuleID()
			}
			if got != c.denier && !(c.denier == "exact" && got == "fold") {
				t.Errorf("call %d (%s): denied by %q, want %q", i, c.path, got, c.denier)
			}
		}
	})
}

// withEntries returns req with an Envoy descriptor of entries es attached,
// as the Envoy API attaches one.
func withEntries(req limiter.Request, es []rules.Entry) limiter.Request {
	descriptor.Attach(&req, &descriptor.Descriptor{Entries: es})
	return req
}
