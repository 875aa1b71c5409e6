package rls

import (
	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/restrict"
	"github.com/sluicehq/sluice/limiter"
)

// moreRestrictive reports whether decision a constrains its caller more
// than b: a decision with a rule over one without, then as the limiter
// ranks the rules of one call (restrict.More). An answer to several
// descriptors describes the most restrictive.
func moreRestrictive(a, b *limiter.Decision) bool {
	if a.Allowed != b.Allowed { // a denial without a rule (too many rules) too
		return !a.Allowed
	}
	if (a.Rule == nil) != (b.Rule == nil) {
		return b.Rule == nil
	}
	ra, rb := result(a), result(b)
	return restrict.More(&ra, &rb)
}

// result is d as the result of its most restrictive rule (in ns, not µs:
// only the order matters).
func result(d *limiter.Decision) algorithm.Result {
	return algorithm.Result{Allowed: d.Allowed, Reason: d.Reason, Remaining: d.Remaining,
		ResetAfter: int64(d.ResetAfter), RetryAfter: int64(d.RetryAfter)}
}
