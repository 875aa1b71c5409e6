package server

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/rules"
)

// A plan nobody defined — a typo, another case, a trailing dot — is decided
// as the plan the caller would have without one, here the default plan: it
// never skips the rules of that plan.
func TestUndefinedPlanIsTheDefaultPlan(t *testing.T) {
	set := &rules.Set{
		DefaultPlan: "free",
		Rules: []rules.Rule{
			{ID: "free-per-user", Match: rules.Match{Plan: "free"}, By: rules.ByUser, Limit: 3, Window: seconds(time.Hour)},
			{ID: "pro-per-user", Match: rules.Match{Plan: "pro"}, By: rules.ByUser, Limit: 100, Window: seconds(time.Hour)},
		},
	}
	for _, plan := range []string{"zzz", "FREE", "free.", "Pro"} {
		t.Run(plan, func(t *testing.T) {
			s, clk := newTestServer(t, set, Config{})
			allowed := 0
			for range 5 {
				a, _ := check(t, s, clk, `{"user": "mallory", "plan": "`+plan+`"}`)
				if a.Allowed {
					allowed++
				}
				if a.Rule == nil || *a.Rule != "free-per-user" {
					t.Fatalf("plan %q: rule %v, want free-per-user", plan, a.Rule)
				}
			}
			if allowed != 3 {
				t.Errorf("plan %q: %d of 5 allowed, want 3 (the default plan's limit)", plan, allowed)
			}
		})
	}
	// A plan the rules name is kept.
	s, clk := newTestServer(t, set, Config{})
	if a, _ := check(t, s, clk, `{"user": "mallory", "plan": "pro"}`); a.Rule == nil || *a.Rule != "pro-per-user" {
		t.Errorf("plan pro: rule %v, want pro-per-user", a.Rule)
	}
}
