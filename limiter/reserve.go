package limiter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/rules"
)

// MaxWait is the longest wait a reservation may ask for: one hour.
const MaxWait = time.Hour

// Errors returned by Reserve.
var (
	// ErrNoBudget: no rule matches the reservation, so there is no budget
	// to reserve from. Unlike a check, which such a call passes, a
	// reservation is refused: a caller that paces by it would otherwise be
	// unlimited because a rule is missing.
	ErrNoBudget = errors.New("limiter: no rule matches the reservation: there is no budget to reserve from")
	// ErrReserveKind: a matching rule's algorithm cannot reserve (wraps
	// algorithm.ErrReserveKind, naming the rule).
	ErrReserveKind = algorithm.ErrReserveKind
	// ErrReserveUnsupported: the store cannot reserve.
	ErrReserveUnsupported = errors.New("limiter: the store cannot reserve")
)

// Reserver is a Store that can also reserve: see Reserve. store/memory,
// store/redis and store/failover implement it.
type Reserver interface {
	// Reserve is Take for calls that may wait up to maxWait (µs ≥ 0). It
	// finds T, the least wait after which every non-shadow op allows (each
	// bucket's first admitting instant, algorithm.FirstAllowed; T is the
	// latest of them). If T ≤ maxWait, every op is taken as Take would at
	// the instant now+T, atomically, and wait is T; res then holds the
	// results at now+T, with ResetAfter counted from now. Otherwise nothing
	// is taken, wait is 0, and each op's res is its result now with Allowed
	// false when its own first instant is beyond maxWait and RetryAfter the
	// time until it no longer is. Only bucket algorithms reserve: an op of
	// another kind is an error wrapping algorithm.ErrReserveKind.
	Reserve(ctx context.Context, ops []Op, res []algorithm.Result, maxWait int64) (info TakeInfo, wait int64, err error)
}

// Reserve asks for a slot for req, waiting at most maxWait: every matching
// rule's bucket is taken from at the same instant, now + wait, the first at
// which all of them admit the call. When that instant is within maxWait the
// Decision is allowed and the caller sends its call after wait; otherwise
// nothing is taken and the Decision is a denial whose RetryAfter is when a
// reservation with the same maxWait could be granted (0 when it never can:
// Reason cost_exceeds_capacity).
//
// Only token_bucket and leaky_bucket rules reserve: a call that matches a
// rule of another algorithm is an error wrapping ErrReserveKind that names
// the rule. A call no rule matches is ErrNoBudget. A call that matches
// more than MaxRulesPerCall rules is denied as Check denies it (reason
// too_many_rules, nothing taken). maxWait is clamped to [0, MaxWait], and
// to the max_reserve_wait of every matching rule that is not a shadow
// (rules.Rule.MaxReserveWait): a rule's budget is never reserved further
// ahead than it allows, whatever the caller asks.
func (l *Limiter) Reserve(ctx context.Context, req *Request, maxWait time.Duration) (Decision, time.Duration, error) {
	maxWait = min(max(maxWait, 0), MaxWait)
	ix := l.rules.Load()
	if ix == nil {
		return Decision{}, 0, ErrNoRules
	}
	sc := l.scratch.Get().(*scratch)
	defer l.scratch.Put(sc)
	var d Decision
	ops, err := l.plan(ix, req, sc, &d)
	if err != nil {
		if errors.Is(err, ErrTooManyRules) {
			return tooMany(sc), 0, nil // as Check denies it
		}
		return Decision{}, 0, err
	}
	if len(ops) == 0 {
		return Decision{}, 0, ErrNoBudget
	}
	for i, r := range sc.used[:len(ops)] {
		// A reservation asks for a slot: a request, never a charge
		// (rules.ChargeAfterResponse), whatever the rule says.
		ops[i].Params.Charge = false
		if r.MaxReserveWait > 0 && !ops[i].Shadow {
			maxWait = min(maxWait, time.Duration(r.MaxReserveWait)) // the rule's cap (rules.Rule.MaxReserveWait)
		}
	}
	info, wait, err := l.reserve(ctx, ops, sc.res[:len(ops)], sc.used[:len(ops)], maxWait.Microseconds())
	if err != nil {
		return Decision{}, 0, err
	}
	fold(&d, sc, len(ops), info)
	return d, time.Duration(wait) * time.Microsecond, nil
}

// reserve checks that every rule can reserve and asks the store.
func (l *Limiter) reserve(ctx context.Context, ops []Op, res []algorithm.Result, used []*rules.Compiled, maxWait int64) (TakeInfo, int64, error) {
	for i := range ops {
		if !algorithm.CanReserve(ops[i].Params.Kind) {
			return TakeInfo{}, 0, fmt.Errorf("%w: rule %q uses %s; put the budget in a token_bucket or leaky_bucket rule, on a plan or endpoint of its own",
				ErrReserveKind, used[i].ID, ops[i].Params.Kind)
		}
	}
	rs, ok := l.store.(Reserver)
	if !ok {
		return TakeInfo{}, 0, fmt.Errorf("%w (%T)", ErrReserveUnsupported, l.store)
	}
	return rs.Reserve(ctx, ops, res, maxWait)
}
