package middleware_test

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicehq/sluice/middleware"
)

// A token whose plan claim names a plan nobody defined is decided under
// the default plan, not under no plan at all.
func TestJWTUndefinedPlanIsTheDefaultPlan(t *testing.T) {
	secret := []byte("test-secret-of-32-bytes-at-least!")
	v, err := middleware.NewJWTVerifier(middleware.JWTConfig{HS256Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	for _, plan := range []string{"zzz", "FREE", "free."} {
		t.Run(plan, func(t *testing.T) {
			l := newLimiter(t, `
rules:
  - {id: free-per-user, match: {plan: free}, by: user, limit: 3, window: 1h}
  - {id: pro-per-user, match: {plan: pro}, by: user, limit: 100, window: 1h}
default_plan: free
`)
			next := &counter{}
			h := middleware.Middleware(l, middleware.WithIdentifier(&middleware.Identifier{JWT: v}))(next)
			tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "mallory", "plan": plan,
				"exp": time.Now().Add(time.Hour).Unix()}).SignedString(secret)
			if err != nil {
				t.Fatal(err)
			}
			for range 5 {
				call{header: map[string]string{"Authorization": "Bearer " + tok}}.do(h)
			}
			if n := next.n.Load(); n != 3 {
				t.Errorf("plan claim %q: %d of 5 passed, want 3 (the default plan's limit)", plan, n)
			}
		})
	}
}
