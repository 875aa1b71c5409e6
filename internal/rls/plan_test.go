package rls_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rules"
)

// A plan entry nobody defined is decided as the default plan: 5 calls with
// plan "zzz" where the default plan allows 3 get 3 OKs. A value that is not
// a plan name at all is one nobody defined, never InvalidArgument (which
// Envoy turns into "allow").
func TestUndefinedPlanIsTheDefaultPlan(t *testing.T) {
	set := &rules.Set{
		DefaultPlan: "free",
		Rules: []rules.Rule{
			{ID: "free-per-user", Match: rules.Match{Plan: "free"}, By: rules.ByUser, Limit: 3, Window: rules.Duration(time.Hour)},
		},
	}
	for _, plan := range []string{"zzz", "FREE", "free.", "free!", "fr ee", ".free", strings.Repeat("f", 65)} {
		t.Run(plan, func(t *testing.T) {
			e := newEnv(t, set)
			allowed := 0
			for range 5 {
				resp := e.call(t, request("edge", desc("user", "mallory", "plan", plan)))
				if resp.OverallCode == ok {
					allowed++
				}
				if resp.Statuses[0].GetCurrentLimit() == nil {
					t.Fatalf("plan %q: no limit in the status, want free-per-user's", plan)
				}
			}
			if allowed != 3 {
				t.Errorf("plan %q: %d of 5 OK, want 3 (the default plan's limit)", plan, allowed)
			}
			// The access log names the effective plan.
			if log := e.log.String(); strings.Count(log, `"plan":"free"`) != 5 {
				t.Errorf("plan %q: access log %s, want the effective plan free on each of 5 lines", plan, log)
			}
		})
	}
}
