package rules

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
)

var (
	testPlans   = []string{"", "free", "pro", "partner"}
	testMethods = []string{"GET", "POST", "DELETE", "HEAD"}
	callMethods = []string{"GET", "POST", "DELETE", "HEAD", "get", "head"}
	testSegs    = []string{"api", "v1", "orders", "a", "", "API", "Orders", ".", "x/..", "%6frders", "a;p=1"}
)

func randPath(r *rand.Rand) string {
	var b strings.Builder
	for n := r.IntN(4); n >= 0; n-- {
		b.WriteString("/")
		b.WriteString(testSegs[r.IntN(len(testSegs))])
	}
	return b.String()
}

// randSet returns n random rules over a small vocabulary, so that requests
// hit many of them.
func randSet(r *rand.Rand, n int) *Set {
	s := &Set{Rules: make([]Rule, n)}
	for i := range s.Rules {
		rule := Rule{ID: fmt.Sprintf("r%d", i), Limit: 1, Window: Duration(time.Second)}
		rule.Match.Plan = testPlans[r.IntN(len(testPlans))]
		method := "*"
		if r.IntN(2) == 0 {
			method = testMethods[r.IntN(len(testMethods))]
		}
		switch r.IntN(5) {
		case 0: // any endpoint
		case 1:
			rule.Match.Endpoint = method + " /*"
		case 2, 3:
			rule.Match.Endpoint = method + " " + strings.TrimSuffix(randPath(r), "/") + "/*"
		default:
			rule.Match.Endpoint = method + " " + randPath(r)
		}
		if r.IntN(5) == 0 {
			rule.Enabled = ptr(r.IntN(2) == 0)
		}
		if rule.Match.Endpoint != "" && r.IntN(3) == 0 {
			rule.Match.PathCase = PathCaseInsensitive
		}
		s.Rules[i] = rule
	}
	return s
}

// bruteMatch is the reference: every enabled rule whose match fits a call
// without headers, in order.
func bruteMatch(s *Set, plan, method, path string) []string {
	return bruteMatchHeader(s, plan, method, path, nil)
}

// bruteMatchHeader is bruteMatch for a call with headers h.
func bruteMatchHeader(s *Set, plan, method, path string, h http.Header) []string {
	var ids []string
	for _, r := range s.Rules {
		if !r.IsEnabled() || r.Match.Plan != "" && r.Match.Plan != plan || len(r.Match.Entries) > 0 || !refHeadersFit(r.Match.Headers, h) {
			continue
		}
		if r.Match.Endpoint != "" {
			e, err := parseEndpoint(r.Match.Endpoint)
			if err != nil {
				panic(err)
			}
			if !refMethodFits(e.Method, method) {
				continue
			}
			if r.Match.PathCase == PathCaseInsensitive {
				lower := func(p string) string { return strings.ToLower(refCleanPath(p)) }
				e.Path = lower(e.Path)
				if !e.Matches(method, lower(path)) {
					continue
				}
			} else if !e.Matches(method, path) {
				continue
			}
		}
		ids = append(ids, r.ID)
	}
	return ids
}

func ids(cs []*Compiled) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.ID)
	}
	return out
}

func TestMatchAgainstBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 50 {
		s := randSet(r, 1+r.IntN(200))
		ix := compileAny(t, s)
		var dst []*Compiled
		for range 200 {
			plan := testPlans[r.IntN(len(testPlans))]
			if r.IntN(10) == 0 {
				plan = "other"
			}
			method := callMethods[r.IntN(len(callMethods))]
			path := randPath(r)
			if r.IntN(20) == 0 {
				path = strings.TrimPrefix(path, "/")
			}
			dst = ix.Match(plan, method, path, dst[:0])
			if got, want := ids(dst), bruteMatch(s, plan, method, path); !slices.Equal(got, want) {
				t.Fatalf("round %d: Match(%q, %q, %q) = %v, want %v", round, plan, method, path, got, want)
			}
			for i := 1; i < len(dst); i++ {
				if dst[i].Seq <= dst[i-1].Seq {
					t.Fatalf("Match(%q, %q, %q): Seq not ascending: %v", plan, method, path, ids(dst))
				}
			}
		}
	}
}

func TestMatch(t *testing.T) {
	s := &Set{Rules: []Rule{
		{ID: "orders-get", Match: Match{Endpoint: "GET /api/orders"}, Limit: 1, Window: Duration(time.Second)},
		{ID: "free-all", Match: Match{Plan: "free"}, Limit: 1, Window: Duration(time.Second)},
		{ID: "api-prefix", Match: Match{Endpoint: "* /api/*"}, Limit: 1, Window: Duration(time.Second)},
		{ID: "off", Limit: 1, Window: Duration(time.Second), Enabled: ptr(false)},
		{ID: "on", Limit: 1, Window: Duration(time.Second), Enabled: ptr(true)},
		{ID: "free-login", Match: Match{Plan: "free", Endpoint: "POST /login"}, Limit: 1, Window: Duration(time.Second)},
		{ID: "pro-api", Match: Match{Plan: "pro", Endpoint: "GET /api/*"}, Limit: 1, Window: Duration(time.Second)},
	}}
	ix, err := Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		plan, method, path string
		want               []string
	}{
		{"free", "GET", "/api/orders", []string{"orders-get", "free-all", "api-prefix", "on"}},
		{"free", "POST", "/api/orders", []string{"free-all", "api-prefix", "on"}},
		{"", "GET", "/api/orders", []string{"orders-get", "api-prefix", "on"}},
		{"", "GET", "/api", []string{"api-prefix", "on"}},
		{"pro", "GET", "/api", []string{"api-prefix", "on", "pro-api"}},
		{"pro", "GET", "/apix", []string{"on"}},
		{"free", "POST", "/login", []string{"free-all", "on", "free-login"}},
		{"nobody", "POST", "/login", []string{"on"}},
	}
	for _, tt := range tests {
		// Match appends: what dst holds already stays.
		sentinel := &Compiled{}
		got := ix.Match(tt.plan, tt.method, tt.path, []*Compiled{sentinel})
		if got[0] != sentinel || !slices.Equal(ids(got[1:]), tt.want) {
			t.Errorf("Match(%q, %q, %q) = %v, want %v after the existing element", tt.plan, tt.method, tt.path, ids(got), tt.want)
		}
	}

	// Disabled rules are compiled and listed, never matched.
	if c, ok := ix.Rule("off"); !ok || c.IsEnabled() || c.Seq != 3 {
		t.Errorf(`Rule("off") = %+v, %v, want the disabled rule at Seq 3`, c, ok)
	}
	if _, ok := ix.Rule("nope"); ok {
		t.Error(`Rule("nope") found a rule`)
	}
	if got := ids(ix.Rules()); !slices.Equal(got, []string{"orders-get", "free-all", "api-prefix", "off", "on", "free-login", "pro-api"}) {
		t.Errorf("Rules() = %v, want every rule in set order", got)
	}

	dst := make([]*Compiled, 0, 16)
	if n := testing.AllocsPerRun(100, func() { dst = ix.Match("free", "GET", "/api/orders", dst[:0]) }); n != 0 {
		t.Errorf("Match allocates %v times, want 0", n)
	}
}

func TestCompiled(t *testing.T) {
	s := &Set{Revision: 4, Rules: []Rule{
		{ID: "a", Limit: 100, Window: Duration(time.Minute), Burst: 5},
		{ID: "b", Limit: 3, Window: Duration(1500 * time.Millisecond), Algorithm: algorithm.FixedWindow},
		{ID: "c", Limit: 3, Window: Duration(time.Millisecond), Algorithm: algorithm.SlidingLog},
	}}
	ix, err := Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		secs   int64
		params algorithm.Params
	}{
		{60, algorithm.Params{Kind: algorithm.TokenBucket, Limit: 100, Window: 60_000_000, Burst: 5}},
		{2, algorithm.Params{Kind: algorithm.FixedWindow, Limit: 3, Window: 1_500_000}},
		{1, algorithm.Params{Kind: algorithm.SlidingLog, Limit: 3, Window: 1_000}},
	}
	for i, c := range ix.Rules() {
		if c.Seq != i || c.WindowSeconds != want[i].secs || c.Params != want[i].params {
			t.Errorf("rule %d = {Seq %d, WindowSeconds %d, Params %+v}, want {%d, %d, %+v}",
				i, c.Seq, c.WindowSeconds, c.Params, i, want[i].secs, want[i].params)
		}
	}
	if ix.Revision() != 4 {
		t.Errorf("Revision() = %d, want 4", ix.Revision())
	}
	// The index keeps its own copy.
	s.Rules[0].Limit = 1
	if ix.Set().Rules[0].Limit != 100 || ix.Rules()[0].Limit != 100 {
		t.Error("changing the Set after Compile changed the Index")
	}
	// An invalid set is refused with Validate's error.
	s.Rules[1].Limit = -1
	if _, err := Compile(s); err == nil || err.Error() != `rules[1] (id "b").limit: must be ≥ 0 (0 denies every call), got -1` {
		t.Errorf("Compile(invalid) = %v, want the Validate error", err)
	}
}

func TestPlanFor(t *testing.T) {
	ix, err := Compile(&Set{
		DefaultPlan: "free",
		Clients: map[string]Client{
			"user:alice":    {Plan: "pro"},
			"api_key:k":     {Plan: "partner"},
			"ip:192.0.2.1":  {Plan: "blocked"},
			"user:api_key:": {Plan: "odd"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		user, key, ip string
		want          string
	}{
		{"user:alice", "api_key:k", "ip:192.0.2.1", "pro"},
		{"user:bob", "api_key:k", "ip:192.0.2.1", "partner"},
		{"", "api_key:k", "ip:192.0.2.1", "partner"},
		{"user:bob", "api_key:x", "ip:192.0.2.1", "blocked"},
		{"", "", "ip:192.0.2.1", "blocked"},
		{"user:bob", "", "ip:192.0.2.2", "free"},
		{"", "", "", "free"},
	}
	for _, tt := range tests {
		if got := ix.planFor(tt.user, tt.key, tt.ip); got != tt.want {
			t.Errorf("planFor(%q, %q, %q) = %q, want %q", tt.user, tt.key, tt.ip, got, tt.want)
		}
	}
	noDefault, _ := Compile(&Set{})
	if got := noDefault.planFor("user:alice", "", ""); got != "" {
		t.Errorf("planFor without clients or default = %q, want \"\"", got)
	}
}

func TestZeroIndex(t *testing.T) {
	for _, ix := range []*Index{nil, {}} {
		if got := ix.Match("free", "GET", "/", nil); got != nil {
			t.Errorf("Match on an empty Index = %v, want nil", got)
		}
		if ix.planFor("user:a", "", "") != "" || ix.Revision() != 0 || ix.Rules() != nil || ix.Set() != nil {
			t.Error("empty Index is not empty")
		}
		if _, ok := ix.Rule("a"); ok {
			t.Error("empty Index has a rule")
		}
	}
}

// benchSet builds n rules shaped like a real configuration: ten per
// service (exact and prefix endpoint rules, some per plan), one plan-wide
// rule per plan and one global rule. Services and plans grow with n, so
// the benchmark request matches the same four rules at every size.
func benchSet(n int) *Set {
	plans := max(n/100, 1)
	s := &Set{Rules: make([]Rule, 0, n)}
	for k := 0; len(s.Rules) < n; k++ {
		plan := fmt.Sprintf("p%d", k%plans)
		ms := []Match{
			{Endpoint: fmt.Sprintf("GET /svc%d/orders", k)},
			{Endpoint: fmt.Sprintf("POST /svc%d/orders", k)},
			{Endpoint: fmt.Sprintf("* /svc%d/*", k)},
			{Plan: plan, Endpoint: fmt.Sprintf("GET /svc%d/orders/*", k)},
			{Endpoint: fmt.Sprintf("DELETE /svc%d/orders/*", k)},
			{Endpoint: fmt.Sprintf("GET /svc%d/users", k)},
			{Endpoint: fmt.Sprintf("* /svc%d/users/*", k)},
			{Plan: plan, Endpoint: fmt.Sprintf("GET /svc%d/orders", k)},
			{Endpoint: fmt.Sprintf("GET /svc%d/health", k)},
			{Endpoint: fmt.Sprintf("PUT /svc%d/orders", k)},
		}
		if k < plans {
			ms[8] = Match{Plan: plan}
		}
		if k == 0 {
			ms[9] = Match{Endpoint: "* /*"}
		}
		for i, m := range ms {
			if len(s.Rules) == n {
				break
			}
			s.Rules = append(s.Rules, Rule{ID: fmt.Sprintf("svc%d-%d", k, i), Match: m, Limit: 100, Window: Duration(time.Minute)})
		}
	}
	return s
}

func BenchmarkMatch(b *testing.B) {
	for _, n := range []int{10, 10000} {
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			ix, err := Compile(benchSet(n))
			if err != nil {
				b.Fatal(err)
			}
			dst := make([]*Compiled, 0, 64)
			matched := 0
			b.ReportAllocs()
			for b.Loop() {
				dst = ix.Match("p0", "GET", "/svc0/orders/42", dst[:0])
				matched = len(dst)
			}
			b.ReportMetric(float64(matched), "rules/op")
		})
	}
}

func BenchmarkMatchParallel(b *testing.B) {
	ix, err := Compile(benchSet(10000))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		dst := make([]*Compiled, 0, 64)
		for pb.Next() {
			dst = ix.Match("p0", "GET", "/svc0/orders/42", dst[:0])
		}
	})
}

func BenchmarkCompile(b *testing.B) {
	s := benchSet(10000)
	b.Run("rules=10000", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Compile(s); err != nil {
				b.Fatal(err)
			}
		}
	})
}
