package rules

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

var (
	ruleHeaderNames  = []string{"X-Tenant", "x-env", "X-ENV"}
	ruleHeaderValues = []string{"acme", "ac*", "*", "globex", "a"}
	callHeaderValues = []string{"acme", "acmex", "ac", "globex", "a", "", "ACME"}
	methodSets       = []string{"GET|POST", "DELETE|HEAD|PUT", "POST|GET|PATCH"}
)

// randHeaderSet is randSet with method sets and match.headers on some
// rules: one header when single, else up to two.
func randHeaderSet(r *rand.Rand, n int, single bool) *Set {
	s := randSet(r, n)
	for i := range s.Rules {
		m := &s.Rules[i].Match
		if m.Endpoint != "" && r.IntN(3) == 0 {
			_, path, _ := strings.Cut(m.Endpoint, " ")
			m.Endpoint = methodSets[r.IntN(len(methodSets))] + " " + path
		}
		k := r.IntN(3)
		if single {
			k = min(k, 1)
		}
		for range k {
			if m.Headers == nil {
				m.Headers = map[string]string{}
			}
			name := ruleHeaderNames[r.IntN(len(ruleHeaderNames))]
			if strings.EqualFold(name, "x-env") {
				for h := range m.Headers {
					if strings.EqualFold(h, "x-env") {
						delete(m.Headers, h)
					}
				}
			}
			m.Headers[name] = ruleHeaderValues[r.IntN(len(ruleHeaderValues))]
		}
	}
	return s
}

func randHeader(r *rand.Rand) http.Header {
	h := http.Header{}
	for _, name := range []string{"X-Tenant", "X-Env"} {
		if r.IntN(3) > 0 {
			h.Set(name, callHeaderValues[r.IntN(len(callHeaderValues))])
			if r.IntN(5) == 0 {
				h.Add(name, "acme") // a second value is never read
			}
		}
	}
	return h
}

func TestMatchHeaderAgainstBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for round := range 50 {
		s := randHeaderSet(r, 1+r.IntN(200), false)
		if err := s.validateFields(); err != nil {
			t.Fatal(err)
		}
		ix := build(s) // overlap aside: matching any set
		var dst []*Compiled
		for range 200 {
			plan := testPlans[r.IntN(len(testPlans))]
			method := callMethods[r.IntN(len(callMethods))]
			path := randPath(r)
			h := randHeader(r)
			dst = ix.MatchHeader(plan, method, path, h, dst[:0])
			if got, want := ids(dst), bruteMatchHeader(s, plan, method, path, h); !slices.Equal(got, want) {
				t.Fatalf("round %d: MatchHeader(%q, %q, %q, %v) = %v, want %v", round, plan, method, path, h, got, want)
			}
			if got, want := ids(ix.Match(plan, method, path, nil)), bruteMatch(s, plan, method, path); !slices.Equal(got, want) {
				t.Fatalf("round %d: Match(%q, %q, %q) = %v, want %v (no header rule)", round, plan, method, path, got, want)
			}
		}
	}
}

// TestMatchHeader: names compare without case, values exactly; a prefix
// value and "*"; the first value of a header; a call without the header, or
// with it empty, does not match.
func TestMatchHeader(t *testing.T) {
	rule := func(id string, h map[string]string, endpoint string) Rule {
		return Rule{ID: id, Match: Match{Headers: h, Endpoint: endpoint}, Limit: 1, Window: Duration(time.Second)}
	}
	ix, err := Compile(&Set{Rules: []Rule{
		rule("acme", map[string]string{"x-tenant": "acme"}, ""),
		rule("prod", map[string]string{"X-Env": "prod-*"}, ""),
		rule("internal", map[string]string{"X-INTERNAL": "*"}, ""),
		rule("both", map[string]string{"X-Tenant": "acme", "X-Env": "prod-eu"}, "POST|PUT /api/*"),
		rule("writes", nil, "PUT|PATCH|DELETE /api/*"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return h
	}
	for _, tt := range []struct {
		method, path string
		h            http.Header
		want         []string
	}{
		{"GET", "/", hdr("X-Tenant", "acme"), []string{"acme"}},
		{"GET", "/", hdr("x-tenant", "acme"), []string{"acme"}}, // http.Header.Add makes the name canonical
		{"GET", "/", hdr("X-Tenant", "Acme"), nil},
		{"GET", "/", hdr("X-Tenant", "acme "), nil},
		{"GET", "/", hdr("X-Tenant", "other", "X-Tenant", "acme"), nil}, // the first value counts
		{"GET", "/", hdr("X-Env", "prod-eu"), []string{"prod"}},
		{"GET", "/", hdr("X-Env", "prod-"), []string{"prod"}},
		{"GET", "/", hdr("X-Env", "prod"), nil},
		{"GET", "/", hdr("X-Internal", "1"), []string{"internal"}},
		{"GET", "/", hdr("X-Internal", ""), nil},
		{"GET", "/", nil, nil},
		{"POST", "/api/x", hdr("X-Tenant", "acme", "X-Env", "prod-eu"), []string{"acme", "prod", "both"}},
		{"post", "/api/x", hdr("X-Tenant", "acme", "X-Env", "prod-us"), []string{"acme", "prod"}},
		{"PUT", "/api", hdr("X-Tenant", "acme", "X-Env", "prod-eu"), []string{"acme", "prod", "both", "writes"}},
		{"GET", "/api/x", hdr("X-Tenant", "acme", "X-Env", "prod-eu"), []string{"acme", "prod"}},
		{"delete", "/api/x", nil, []string{"writes"}},
		{"HEAD", "/api/x", nil, nil},
		{"GET|POST", "/api/x", hdr("X-Tenant", "acme", "X-Env", "prod-eu"), []string{"acme", "prod"}},
	} {
		if got := ids(ix.MatchHeader("", tt.method, tt.path, tt.h, nil)); !slices.Equal(got, tt.want) {
			t.Errorf("MatchHeader(%q, %q, %v) = %v, want %v", tt.method, tt.path, tt.h, got, tt.want)
		}
	}
}

func TestValidateHeaders(t *testing.T) {
	long := strings.Repeat("v", maxHeaderValue+1)
	many := map[string]string{}
	for i := range maxHeaders + 1 {
		many[fmt.Sprintf("X-H%d", i)] = "v"
	}
	for _, tt := range []struct {
		m    Match
		want string // the error, "" = valid
	}{
		{Match{Headers: map[string]string{"X-Tenant": "acme", "X-Env": "prod-*", "X-Any": "*"}}, ""},
		{Match{Headers: map[string]string{"X-Tenant": ""}}, `match.headers["X-Tenant"]: want a value: the exact value, a prefix ending in "*" such as "prod-*", or "*" for any value`},
		{Match{Headers: map[string]string{"X-Tenant": "a*b"}}, `match.headers["X-Tenant"]: "*" is only allowed last (every value starting with what comes before it), got "a*b"; want the exact value, a prefix ending in "*" such as "prod-*", or "*" for any value`},
		{Match{Headers: map[string]string{"X-Tenant": long}}, `match.headers["X-Tenant"]: the value is 257 bytes, want at most 256`},
		{Match{Headers: map[string]string{"X-Tenant": "a\nb"}}, `match.headers["X-Tenant"]: the value must be UTF-8 without control characters`},
		{Match{Headers: map[string]string{"X Tenant": "a"}}, `match.headers["X Tenant"]: a header name is letters, digits and !#$%&'*+.^_` + "`" + `|~- , got ' '`},
		{Match{Headers: map[string]string{"": "a"}}, `match.headers[""]: want a header name such as "X-Tenant"`},
		{Match{Headers: map[string]string{"X-Tenant": "a", "x-tenant": "b"}}, `match.headers["x-tenant"]: the same header as "X-Tenant": header names compare without regard to case; keep one`},
		{Match{Headers: many}, `match.headers: at most 8 headers, got 9; make two rules`},
		{Match{Domain: "edge", Headers: map[string]string{"X-Tenant": "a"}}, `match.headers: calls in an Envoy domain carry no request headers (only the gateway and the middleware see them); remove headers or domain`},
		{Match{Entries: []Entry{{Key: "k"}}, Headers: map[string]string{"X-Tenant": "a"}}, `match.headers: a rule on descriptor entries (Envoy API) sees no request headers; remove headers or make two rules`},
		{Match{Endpoint: "GET|POST /a"}, ""},
		{Match{Endpoint: "GET|GET /a"}, `match.endpoint: want "METHOD /path", e.g. "GET /api/orders"; "GET|GET" names GET twice`},
		{Match{Endpoint: "GET|* /a"}, `match.endpoint: want "METHOD /path", e.g. "GET /api/orders"; "*" is every method and joins no other: write "*" alone or list the methods, got "GET|*"`},
		{Match{Endpoint: "GET|get /a"}, `the method must be "*", an uppercase HTTP method such as GET (at most 16 letters), or several joined by "|" such as GET|HEAD, got "GET|get"`},
		{Match{Endpoint: "GET| /a"}, `or several joined by "|" such as GET|HEAD, got "GET|"`},
		{Match{Endpoint: strings.Repeat("A|", maxMethods) + "B /a"}, `at most 16 methods joined by "|", got 17`},
	} {
		r := Rule{ID: "r", Match: tt.m, Limit: 1, Window: Duration(time.Second)}
		checkErr(t, fmt.Sprintf("Validate(%+v)", tt.m), r.Validate(), tt.want)
	}
}

// A rules file names the line of a bad header, and a value that is not a
// string.
func TestParseYAMLHeaders(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"rules:\n  - id: a\n    match:\n      headers: {X-Tenant: \"a*b\"}\n    limit: 1\n    window: 1m\n",
			`line 4: rules[0] (id "a").match.headers["X-Tenant"]: "*" is only allowed last`},
		{"rules:\n  - id: a\n    match:\n      headers: {X-Tenant: 1}\n    limit: 1\n    window: 1m\n",
			`line 4: rules[0] (id "a").match.headers["X-Tenant"]: want a string: the exact value, a prefix ending in "*" such as "prod-*", or "*" for any value, got 1`},
		{"rules:\n  - id: a\n    match:\n      headers: [X-Tenant]\n    limit: 1\n    window: 1m\n",
			`line 4: rules[0] (id "a").match.headers: want an object of header name to value, such as {"X-Tenant": "acme"}, got an array`},
		{"rules:\n  - id: a\n    match:\n      headers: {X-Tenant: a, X-Tenant: b}\n    limit: 1\n    window: 1m\n",
			`rules[0] (id "a").match.headers["X-Tenant"]: given twice`},
	} {
		_, err := ParseYAML([]byte(tt.in))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseYAML(%q) = %v, want %q", tt.in, err, tt.want)
		}
	}
}

// The overlap bound counts, per header name, the value that reaches the
// most rules: 40 rules on 40 tenants are fine, 33 on one value (exact, or
// reached through prefixes) are not, and the error names the headers.
func TestOverlapHeaders(t *testing.T) {
	tenants := catchAll(40, func(i int, r *Rule) { r.Match.Headers = map[string]string{"X-Tenant": fmt.Sprintf("t%d", i)} })
	if _, err := Compile(&Set{Rules: tenants}); err != nil {
		t.Errorf("40 rules on 40 tenants: %v, want accepted", err)
	}
	// 20 on "acme", 13 on prefixes of it: 33 for a call with X-Tenant: acme.
	rs := catchAll(33, func(i int, r *Rule) {
		v := "acme"
		if i >= 20 {
			v = "acme"[:i%4] + "*"
		}
		r.Match.Headers = map[string]string{"x-tenant": v}
	})
	_, err := Compile(&Set{Rules: rs})
	if err == nil || !strings.HasPrefix(err.Error(), `rules: a call such as GET / with X-Tenant: acme on any plan matches 33 enabled rules`) {
		t.Errorf("33 rules reached by acme: %v, want the call named with its header", err)
	}
	// The same 33 rules split over two header names sum up.
	rs = catchAll(33, func(i int, r *Rule) {
		name := "X-A"
		if i%2 == 0 {
			name = "X-B"
		}
		r.Match.Headers = map[string]string{name: "v"}
	})
	if _, err := Compile(&Set{Rules: rs}); err == nil || !strings.Contains(err.Error(), "with X-A: v, X-B: v on any plan matches 33") {
		t.Errorf("33 rules on two headers: %v, want refused", err)
	}
	// Method sets count each of their methods.
	rs = catchAll(33, func(i int, r *Rule) {
		r.Match.Endpoint = []string{"GET|POST /a", "PUT|POST /a", "POST /a"}[i%3]
	})
	if _, err := Compile(&Set{Rules: rs}); err == nil || !strings.HasPrefix(err.Error(), "rules: a call such as POST /a on any plan matches 33") {
		t.Errorf("33 rules on POST through method sets: %v, want refused", err)
	}
}

// Random sets of rules with one header each: an accepted set has no call,
// among many random ones, that matches more than maxRulesPerCall rules; a
// refused set names a call that does.
func TestOverlapHeadersAgainstBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	accepted, refused := 0, 0
	for round := range 60 {
		s := randHeaderSet(r, 60+r.IntN(150), true)
		_, err := Compile(s)
		if err != nil {
			refused++
			ix := build(s)
			o := ix.findOverlap()
			if o == nil {
				t.Fatalf("round %d: Compile: %v, but findOverlap finds no call", round, err)
			}
			h := http.Header{}
			for _, kv := range o.headers {
				k, v, _ := strings.Cut(kv, ": ")
				h.Set(k, v)
			}
			if got := bruteMatchHeader(s, o.plan, o.method, o.path, h); len(got) != len(o.matched) {
				t.Fatalf("round %d: Compile: %v; the reference matches %d rules for that call, want %d", round, err, len(got), len(o.matched))
			}
			continue
		}
		accepted++
		for range 300 {
			plan := testPlans[r.IntN(len(testPlans))]
			method := testMethods[r.IntN(len(testMethods))]
			if n := len(bruteMatchHeader(s, plan, method, randPath(r), randHeader(r))); n > maxRulesPerCall {
				t.Fatalf("round %d: accepted a set in which a call matches %d rules", round, n)
			}
		}
	}
	if accepted < 10 || refused < 10 {
		t.Errorf("%d sets accepted, %d refused: want both kinds tested", accepted, refused)
	}
}

// MatchHeader allocates nothing, headers or not.
func TestMatchHeaderAllocs(t *testing.T) {
	s := &Set{Rules: catchAll(20, func(i int, r *Rule) {
		r.Match.Endpoint = "GET|POST /api/*"
		r.Match.Headers = map[string]string{"X-Tenant": fmt.Sprintf("t%d", i%5), "X-Env": []string{"prod-*", "*"}[i%2]}
	})}
	ix, err := Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{"X-Tenant": {"t1"}, "X-Env": {"prod-eu"}}
	dst := make([]*Compiled, 0, maxRulesPerCall)
	n := testing.AllocsPerRun(100, func() { dst = ix.MatchHeader("", "POST", "/api//x", h, dst[:0]) })
	if n != 0 || len(dst) != 4 {
		t.Errorf("MatchHeader: %v allocations, %d rules; want 0, 4", n, len(dst))
	}
}

// BenchmarkMatchHeader is BenchmarkMatch's 10,000 rules and as many again
// on headers: one per tenant, one per tenant and environment prefix, and
// method sets. The call carries a tenant and an environment.
func BenchmarkMatchHeader(b *testing.B) {
	s := benchSet(10000)
	for i := range 10000 {
		m := Match{Headers: map[string]string{"X-Tenant": fmt.Sprintf("t%d", i)}}
		switch i % 3 {
		case 1:
			m.Headers["X-Env"] = "prod-*"
			m.Endpoint = "PUT|PATCH|DELETE /svc0/*"
		case 2:
			m.Endpoint = fmt.Sprintf("GET|HEAD /svc%d/orders/*", i%1000)
		}
		s.Rules = append(s.Rules, Rule{ID: fmt.Sprintf("h%d", i), Match: m, Limit: 100, Window: Duration(time.Minute)})
	}
	ix, err := Compile(s)
	if err != nil {
		b.Fatal(err)
	}
	h := http.Header{"X-Tenant": {"t2"}, "X-Env": {"prod-eu"}}
	dst := make([]*Compiled, 0, 64)
	matched := 0
	b.ReportAllocs()
	for b.Loop() {
		dst = ix.MatchHeader("p0", "GET", "/svc2/orders/42", h, dst[:0])
		matched = len(dst)
	}
	b.ReportMetric(float64(matched), "rules/op")
}

// TestMatchMethods: methods outside the common ones, in sets or alone, in
// any case; a call without a method or with a set for a method.
func TestMatchMethods(t *testing.T) {
	ix, err := Compile(&Set{Rules: catchAll(4, func(i int, r *Rule) {
		r.Match.Endpoint = []string{"PROPFIND /d", "MKCOL|GET /d", "* /d", "GET /d"}[i]
	})})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		method string
		want   []string
	}{
		{"PROPFIND", []string{"r00", "r02"}},
		{"propfind", []string{"r00", "r02"}},
		{"mkcol", []string{"r01", "r02"}},
		{"head", []string{"r01", "r02", "r03"}},
		{"", []string{"r02"}},
		{"GET|MKCOL", []string{"r02"}},
		{"MKCOL|GET", []string{"r02"}},
		{"PROPFINDX", []string{"r02"}},
	} {
		if got := ids(ix.Match("", tt.method, "/d", nil)); !slices.Equal(got, tt.want) {
			t.Errorf("Match(%q, /d) = %v, want %v", tt.method, got, tt.want)
		}
	}
}
