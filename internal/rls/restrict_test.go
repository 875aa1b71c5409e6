package rls

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
)

// TestMoreRestrictive: a decision with a rule ranks over one without, a
// denial over an allowance, then as the rules of one call rank.
func TestMoreRestrictive(t *testing.T) {
	r := &rules.Compiled{}
	none := limiter.Decision{Allowed: true}
	ok := limiter.Decision{Allowed: true, Rule: r, Remaining: 5}
	low := limiter.Decision{Allowed: true, Rule: r, Remaining: 1}
	denied := limiter.Decision{Rule: r, RetryAfter: time.Second}
	longer := limiter.Decision{Rule: r, RetryAfter: time.Minute}
	order := []limiter.Decision{none, ok, low, denied, longer}
	for i := range order {
		for j := range order {
			if got, want := moreRestrictive(&order[j], &order[i]), j > i; got != want {
				t.Errorf("moreRestrictive(%+v, %+v) = %v, want %v", order[j], order[i], got, want)
			}
		}
	}
}
