package middleware_test

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// A token whose plan claim names a plan nobody defined is decided under
// the default plan, not under no plan at all.
func TestJWTUndefinedPlanIsTheDefaultPlan(t *testing.T) {
	for _, plan := range []string{"zzz", "FREE", "free."} {
		t.Run(plan, func(t *testing.T) {
			next := &counter{}
			h := jwtFilter(t, `
rules:
  - {id: free-per-user, match: {plan: free}, by: user, limit: 3, window: 1h}
  - {id: pro-per-user, match: {plan: pro}, by: user, limit: 100, window: 1h}
default_plan: free
`, next)
			auth := bearer(t, jwt.MapClaims{"sub": "mallory", "plan": plan, "exp": time.Now().Add(time.Hour).Unix()})
			for range 5 {
				call{header: map[string]string{"Authorization": auth}}.do(h)
			}
			if n := next.n.Load(); n != 3 {
				t.Errorf("plan claim %q: %d of 5 passed, want 3 (the default plan's limit)", plan, n)
			}
		})
	}
}
