package rules

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// compileAny compiles s; when s is refused for overlapping rules, it checks
// that the call the error names does match more than maxRulesPerCall rules
// and returns the Index anyway, so that matching can be tested on any set.
func compileAny(t *testing.T, s *Set) *Index {
	t.Helper()
	ix, err := Compile(s)
	if err == nil {
		return ix
	}
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "rules" {
		t.Fatal(err)
	}
	ix = build(s)
	o := ix.findOverlap()
	if o == nil {
		t.Fatalf("Compile: %v, but findOverlap finds no call", err)
	}
	if got := bruteMatchDomain(s, o.domain, o.plan, o.method, o.path); len(got) != len(o.matched) || len(got) <= maxRulesPerCall {
		t.Fatalf("Compile: %v; the reference matches %d rules for that call, want %d > %d", err, len(got), len(o.matched), maxRulesPerCall)
	}
	return ix
}

func catchAll(n int, mod func(i int, r *Rule)) []Rule {
	rs := make([]Rule, n)
	for i := range rs {
		rs[i] = Rule{ID: fmt.Sprintf("r%02d", i), Limit: 1, Window: Duration(time.Minute)}
		if mod != nil {
			mod(i, &rs[i])
		}
	}
	return rs
}

func TestOverlap(t *testing.T) {
	off := false
	tests := []struct {
		name    string
		rules   []Rule
		wantErr string // "" when accepted, else a part of the message
	}{
		{"32 catch-all", catchAll(32, nil), ""},
		{"33 catch-all", catchAll(33, nil), `a call such as GET / on any plan matches 33 enabled rules, more than the 32 one decision applies: "r00", "r01",`},
		{"33 catch-all, one disabled", catchAll(33, func(i int, r *Rule) {
			if i == 7 {
				r.Enabled = &off
			}
		}), ""},
		{"keyed by different identities still add up", catchAll(33, func(i int, r *Rule) {
			r.By = []By{ByUser, ByAPIKey, ByIP, ByClient}[i%4]
		}), "matches 33 enabled rules"},
		{"20 on no plan, 12 per plan", catchAll(44, func(i int, r *Rule) {
			if i >= 20 {
				r.Match.Plan = []string{"free", "pro"}[i%2]
			}
		}), ""},
		{"20 on no plan, 13 on free", catchAll(46, func(i int, r *Rule) {
			if i >= 20 {
				r.Match.Plan = []string{"free", "pro"}[i%2]
			}
		}), `on plan "free" matches 33 enabled rules`},
		{"disjoint exact paths", catchAll(100, func(i int, r *Rule) {
			r.Match.Endpoint = fmt.Sprintf("GET /api/r%d", i)
		}), ""},
		{"nested prefixes", catchAll(33, func(i int, r *Rule) {
			r.Match.Endpoint = "* " + strings.Repeat("/a", i+1) + "/*"
		}), "a call such as GET " + strings.Repeat("/a", 33) + " on any plan matches 33"},
		{"prefixes on sibling paths", catchAll(64, func(i int, r *Rule) {
			r.Match.Endpoint = fmt.Sprintf("* /s%d%s/*", i%2, strings.Repeat("/a", i/2))
		}), ""},
		{"exact path under prefixes", catchAll(33, func(i int, r *Rule) {
			if i == 32 {
				r.Match.Endpoint = "POST /api/orders/42"
				return
			}
			r.Match.Endpoint = "* /api/*"
		}), "a call such as POST /api/orders/42 on any plan matches 33"},
		{"one method each", catchAll(60, func(i int, r *Rule) {
			r.Match.Endpoint = []string{"GET", "POST"}[i%2] + " /api/orders"
		}), ""},
		{"a method and any method", catchAll(33, func(i int, r *Rule) {
			r.Match.Endpoint = []string{"PATCH", "*"}[i%2] + " /api/orders"
		}), "a call such as PATCH /api/orders on any plan matches 33"},
		{"domains apart", catchAll(60, func(i int, r *Rule) {
			r.Match.Domain = []string{"edge", "internal"}[i%2]
		}), ""},
		{"a domain and no domain", catchAll(33, func(i int, r *Rule) {
			if i%3 == 0 {
				r.Match.Domain = "edge"
			}
		}), `a call such as GET / on any plan in the Envoy domain "edge" matches 33`},
		{"domain, plan and endpoint", catchAll(33, func(i int, r *Rule) {
			switch i % 3 {
			case 0:
				r.Match.Domain = "edge"
			case 1:
				r.Match.Plan = "free"
			default:
				r.Match.Endpoint = "DELETE /x"
			}
		}), `a call such as DELETE /x on plan "free" in the Envoy domain "edge" matches 33`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Set{Rules: tt.rules}
			_, cerr := Compile(s)
			verr := s.Validate()
			for _, err := range []error{cerr, verr} {
				if tt.wantErr == "" {
					if err != nil {
						t.Fatalf("refused: %v", err)
					}
					continue
				}
				var fe *FieldError
				if !errors.As(err, &fe) || fe.Field != "rules" || !strings.Contains(fe.Message, tt.wantErr) ||
					!strings.Contains(fe.Message, "give some of them a narrower match") {
					t.Fatalf("error %v, want a rules error containing %q", err, tt.wantErr)
				}
			}
		})
	}
}

// Random sets around the bound: an accepted set has no call, among many
// random ones, that matches more than maxRulesPerCall rules; a refused set
// names a call that does (compileAny).
func TestOverlapAgainstBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	accepted, refused := 0, 0
	for round := range 100 {
		s := randSet(r, 100+r.IntN(200))
		for i := range s.Rules {
			s.Rules[i].Match.Domain = testDomains[r.IntN(len(testDomains))]
		}
		if _, err := Compile(s); err != nil {
			refused++
			compileAny(t, s)
			continue
		}
		accepted++
		for range 200 {
			domain := testDomains[r.IntN(len(testDomains))]
			plan := testPlans[r.IntN(len(testPlans))]
			method := testMethods[r.IntN(len(testMethods))]
			if n := len(bruteMatchDomain(s, domain, plan, method, randPath(r))); n > maxRulesPerCall {
				t.Fatalf("round %d: accepted a set in which a call matches %d rules", round, n)
			}
		}
	}
	if accepted < 20 || refused < 20 {
		t.Errorf("%d sets accepted, %d refused: want both kinds tested", accepted, refused)
	}
	if testing.Verbose() {
		t.Logf("%d sets accepted, %d refused", accepted, refused)
	}
}

// A refused rules file names the line of its rules.
func TestOverlapYAML(t *testing.T) {
	var b strings.Builder
	b.WriteString("default_plan: free\nrules:\n")
	for i := range 33 {
		fmt.Fprintf(&b, "  - {id: r%d, limit: 1, window: 1m}\n", i)
	}
	_, err := ParseYAML([]byte(b.String()))
	if err == nil || !strings.HasPrefix(err.Error(), "line 2: rules: a call such as GET / on any plan matches 33 enabled rules") {
		t.Fatalf("ParseYAML: %v, want line 2: rules: …", err)
	}
}
