package limiter

import (
	"time"

	"github.com/sluicehq/sluice/algorithm"
)

// tooMany is the decision on a call that matches more than MaxRulesPerCall
// rules (match returned ErrTooManyRules; sc holds its plan): denied, reason
// algorithm.ReasonTooManyRules, no rule, nothing taken.
//
// One atomic take applies at most MaxRulesPerCall buckets, and a decision
// that applied only some of the call's rules could pass a call that one
// of the others would deny. An error would be no better: the Envoy API
// would answer it with a gRPC error, which Envoy with failure_mode_deny
// false turns into "allow". So the call fails closed. Compile keeps HTTP
// calls within the bound; a call gets past it only with what it brings
// itself to the Envoy API (a descriptor's own limit, descriptor entries
// that select rules), next to rules that already fill a decision.
// RetryAfter is 0: waiting does not help, a rule change does.
func tooMany(sc *scratch) Decision {
	return Decision{Reason: algorithm.ReasonTooManyRules, Plan: sc.plan, Now: time.Now()}
}
