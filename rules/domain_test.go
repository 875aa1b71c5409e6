package rules

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

var testDomains = []string{"", "", "edge", "internal"}

// bruteMatchDomain is the reference for a view: every enabled rule whose
// match fits, domain included, in order.
func bruteMatchDomain(s *Set, domain, plan, method, path string) []string {
	var out []string
	want := bruteMatch(s, plan, method, path)
	for _, r := range s.Rules {
		if slices.Contains(want, r.ID) && (r.Match.Domain == "" || r.Match.Domain == domain) {
			out = append(out, r.ID)
		}
	}
	return out
}

func TestDomainAgainstBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for round := range 50 {
		s := randSet(r, 1+r.IntN(200))
		for i := range s.Rules {
			s.Rules[i].Match.Domain = testDomains[r.IntN(len(testDomains))]
		}
		ix := compileAny(t, s)
		var dst []*Compiled
		for range 200 {
			domain := testDomains[r.IntN(len(testDomains))]
			if r.IntN(10) == 0 {
				domain = "unknown"
			}
			plan := testPlans[r.IntN(len(testPlans))]
			method := testMethods[r.IntN(len(testMethods))]
			path := randPath(r)
			dst = ix.Domain(domain).Match(plan, method, path, dst[:0])
			if got, want := ids(dst), bruteMatchDomain(s, domain, plan, method, path); !slices.Equal(got, want) {
				t.Fatalf("round %d: Domain(%q).Match(%q, %q, %q) = %v, want %v", round, domain, plan, method, path, got, want)
			}
		}
	}
}

func TestDomain(t *testing.T) {
	sec := Duration(time.Second)
	s := &Set{Revision: 7, DefaultPlan: "free", Rules: []Rule{
		{ID: "any", Limit: 1, Window: sec},
		{ID: "edge-all", Match: Match{Domain: "edge"}, Limit: 1, Window: sec},
		{ID: "edge-login", Match: Match{Domain: "edge", Endpoint: "POST /login"}, Limit: 1, Window: sec},
		{ID: "internal-free", Match: Match{Domain: "internal", Plan: "free"}, Limit: 1, Window: sec},
		{ID: "edge-off", Match: Match{Domain: "off"}, Limit: 1, Window: sec, Enabled: ptr(false)},
		{ID: "login", Match: Match{Endpoint: "POST /login"}, Limit: 1, Window: sec},
	}}
	ix, err := Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		domain, plan, method, path string
		want                       []string
	}{
		{"", "free", "POST", "/login", []string{"any", "login"}}, // the HTTP API: no domain rules
		{"edge", "free", "POST", "/login", []string{"any", "edge-all", "edge-login", "login"}},
		{"edge", "free", "GET", "/x", []string{"any", "edge-all"}},
		{"internal", "free", "GET", "/x", []string{"any", "internal-free"}},
		{"internal", "pro", "GET", "/x", []string{"any"}},
		{"unknown", "free", "POST", "/login", []string{"any", "login"}},
		{"off", "free", "GET", "/x", []string{"any"}}, // only a disabled rule names it
	}
	for _, tt := range tests {
		v := ix.Domain(tt.domain)
		if got := ids(v.Match(tt.plan, tt.method, tt.path, nil)); !slices.Equal(got, tt.want) {
			t.Errorf("Domain(%q).Match(%q, %q, %q) = %v, want %v", tt.domain, tt.plan, tt.method, tt.path, got, tt.want)
		}
		// A view shares everything but the lists with the Index.
		if v.Revision() != 7 || v.Set() != ix.Set() || len(v.Rules()) != 6 || v.planFor("", "", "") != "free" {
			t.Errorf("Domain(%q): revision %d, %d rules, default plan %q, want the Index's", tt.domain, v.Revision(), len(v.Rules()), v.planFor("", "", ""))
		}
		if _, ok := v.Rule("edge-login"); !ok {
			t.Errorf("Domain(%q).Rule(%q) not found, want every rule", tt.domain, "edge-login")
		}
		// Domain of a view is the same as Domain of the Index.
		if got := v.Domain("edge"); got != ix.Domain("edge") {
			t.Errorf("Domain(%q).Domain(%q) is not Domain(%q)", tt.domain, "edge", "edge")
		}
	}
	if ix.Domain("") != ix || ix.Domain("unknown") != ix {
		t.Error(`Domain("") or Domain("unknown") is not the Index itself`)
	}
	if got := ix.Domains(); !slices.Equal(got, []string{"edge", "internal"}) {
		t.Errorf("Domains() = %v, want [edge internal]", got)
	}
	var nilIx *Index
	if nilIx.Domain("edge") != nil || nilIx.Domains() != nil {
		t.Error("a nil Index has views")
	}
	v := ix.Domain("edge")
	if n := testing.AllocsPerRun(100, func() { _ = ix.Domain("edge") }); n != 0 {
		t.Errorf("Domain allocates %v times, want 0", n)
	}
	dst := make([]*Compiled, 0, 16)
	if n := testing.AllocsPerRun(100, func() { dst = v.Match("free", "POST", "/login", dst[:0]) }); n != 0 {
		t.Errorf("a view's Match allocates %v times, want 0", n)
	}
}

func TestDomainValidateAndDecode(t *testing.T) {
	ok := `"id":"a","limit":1,"window":"1s"`
	tests := []struct {
		json, wantErr string
		want          Match
	}{
		{`{` + ok + `,"match":{"domain":"edge-proxy.v1"}}`, "", Match{Domain: "edge-proxy.v1"}},
		{`{` + ok + `,"match":{"domain":"Envoy_1","plan":"free","endpoint":"GET /x"}}`, "", Match{Domain: "Envoy_1", Plan: "free", Endpoint: "GET /x"}},
		{`{` + ok + `,"match":{"domain":""}}`, "", Match{}},
		// Any text, as Envoy and envoyproxy/ratelimit take it (Envoy
		// Gateway's domains look like default/eg/https).
		{`{` + ok + `,"match":{"domain":"default/eg/https"}}`, "", Match{Domain: "default/eg/https"}},
		{`{` + ok + `,"match":{"domain":"-edge a b"}}`, "", Match{Domain: "-edge a b"}},
		{`{` + ok + `,"match":{"domain":"` + strings.Repeat("d", 1025) + `"}}`, `match.domain: must be at most 1024 bytes, got 1025`, Match{}},
		{`{` + ok + `,"match":{"domain":7}}`, `match.domain: want a string, got 7`, Match{}},
	}
	for _, tt := range tests {
		r, err := decodeRuleJSON([]byte(tt.json))
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("decodeRuleJSON(%s) = %v, want no error", tt.json, err)
		case tt.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.wantErr)):
			t.Errorf("decodeRuleJSON(%s) = %v, want an error starting %q", tt.json, err, tt.wantErr)
		case tt.wantErr == "" && !reflect.DeepEqual(r.Match, tt.want):
			t.Errorf("decodeRuleJSON(%s).Match = %+v, want %+v", tt.json, r.Match, tt.want)
		}
	}

	// The domain survives the YAML rules file both ways, with its line on
	// errors.
	s := &Set{Rules: []Rule{{ID: "a", Match: Match{Domain: "edge", Plan: "free"}, Limit: 1, Window: Duration(time.Second)}}}
	back, b := yamlRoundTrip(t, s)
	if !reflect.DeepEqual(back.Rules[0].Match, s.Rules[0].Match) {
		t.Errorf("YAML round trip: match = %+v, want %+v\n%s", back.Rules[0].Match, s.Rules[0].Match, b)
	}
	_, err := ParseYAML([]byte("rules:\n  - id: a\n    limit: 1\n    window: 1s\n    match:\n      domain: " + strings.Repeat("d", 1025) + "\n"))
	if err == nil || !strings.HasPrefix(err.Error(), `line 6: rules[0] (id "a").match.domain: must be at most 1024 bytes`) {
		t.Errorf("ParseYAML(bad domain) = %v, want the field and line 6", err)
	}
}
