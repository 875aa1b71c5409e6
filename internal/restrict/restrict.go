// Package restrict orders results by how much they constrain the caller. The
// limiter picks with it the rule a call's decision describes, and the
// Envoy API the descriptor its answer describes, so that both agree.
package restrict

import "github.com/sluicehq/sluice/algorithm"

// More reports whether a constrains the caller more than b: a
// denial over an allowance, a call that can never pass over one that can
// wait, a longer wait, fewer remaining, a later reset.
func More(a, b *algorithm.Result) bool {
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	if !a.Allowed {
		ac, bc := a.Reason == algorithm.ReasonCostExceedsCapacity, b.Reason == algorithm.ReasonCostExceedsCapacity
		if ac != bc {
			return ac
		}
		if a.RetryAfter != b.RetryAfter {
			return a.RetryAfter > b.RetryAfter
		}
	}
	if a.Remaining != b.Remaining {
		return a.Remaining < b.Remaining
	}
	return a.ResetAfter > b.ResetAfter
}
