package limiter

import (
	"context"
	"errors"
	"strings"

	"github.com/sluicehq/sluice/algorithm"
)

// Explanation is what Explain found about a call: the rules it matches,
// the bucket each takes from with that bucket's state, and the decision
// Check would make now.
type Explanation struct {
	// Plan is the effective plan the call was matched under.
	Plan string
	// Matched are the ids of the rules that match the call, after
	// replaces, in the order the rule set lists them.
	Matched []string
	// Buckets are the buckets the call would take from, one per rule that
	// applies (an unlimited rule, or one keyed by a value the call lacks,
	// takes from none).
	Buckets []ExplainedBucket
	// Decision is what Check would decide for the call's cost now. Its
	// Remaining is read before the call's cost is taken.
	Decision Decision
}

// ExplainedBucket is one bucket of an Explanation.
type ExplainedBucket struct {
	Rule   string // rule id
	Client string // the bucket's client id, e.g. "user:alice", "ip:2001:db8::/64"
	Shadow bool   // a shadow rule: never vetoes the call
	Limit  int64
	// Result is the bucket read with cost 0: Remaining is what is left,
	// ResetAfter the time until it is whole.
	Result algorithm.Result
	// Allows: the call's cost would pass this bucket now.
	Allows bool
}

// Explain plans req as Check does and reads, without taking anything,
// every bucket the call would take from (each op at cost 0, as a
// Request.Peek), and says what Check would decide for req.Cost (0 means
// 1) now. A rule of limit 0 is reported as denying without a read.
func (l *Limiter) Explain(ctx context.Context, req *Request) (Explanation, error) {
	ix := l.rules.Load()
	if ix == nil {
		return Explanation{}, ErrNoRules
	}
	cost := req.Cost
	if cost <= 0 {
		cost = 1
	}
	peek := *req
	peek.Peek = true
	sc := new(scratch) // not pooled: Explanation keeps the client ids
	var d Decision
	var ex Explanation
	matched, err := l.match(ix, &peek, sc)
	if errors.Is(err, ErrTooManyRules) {
		ex.Decision = tooMany(sc)
		ex.Plan = sc.plan
		return ex, nil
	}
	if err != nil {
		return ex, err
	}
	if own := req.own(); ix.Replaces() || own != nil && len(own.Replaces) > 0 {
		matched = dropReplaced(matched, matched)
	}
	for _, r := range matched {
		ex.Matched = append(ex.Matched, r.ID)
	}
	ops := l.ops(&peek, sc, matched, &d)
	ex.Plan = sc.plan
	if len(ops) == 0 {
		ex.Decision = d
		return ex, nil
	}
	info, err := l.store.Take(ctx, ops, sc.res[:len(ops)])
	if err != nil {
		return ex, err
	}
	// Judge each bucket for the call's cost from what the read left.
	for i := range ops {
		r := &sc.res[i]
		if ops[i].Cost == 0 && r.Allowed && r.Remaining < cost {
			// The read passes; the call's cost would not. RetryAfter is
			// then an upper bound: the time until the bucket is whole.
			r.Allowed, r.Reason = false, algorithm.ReasonLimited
			if sc.used[i].Limit > 0 && cost > sc.used[i].Params.Capacity() {
				r.Reason = algorithm.ReasonCostExceedsCapacity
			} else {
				r.RetryAfter = r.ResetAfter
			}
		}
		ex.Buckets = append(ex.Buckets, ExplainedBucket{
			Rule: ops[i].Rule, Client: strings.Clone(ops[i].Client), Shadow: ops[i].Shadow,
			Limit: sc.used[i].Limit, Result: sc.res[i], Allows: r.Allowed,
		})
	}
	fold(&d, sc, len(ops), info)
	ex.Decision = d
	return ex, nil
}

// PeekBucket reads, without taking anything, the bucket of client under
// the rule in force with id rule. ok is false when no such rule is in
// force or it counts nothing (unlimited).
func (l *Limiter) PeekBucket(ctx context.Context, rule, client string) (r algorithm.Result, limit int64, ok bool, err error) {
	ix := l.rules.Load()
	if ix == nil {
		return r, 0, false, ErrNoRules
	}
	c, found := ix.Rule(rule)
	if !found || c.Unlimited || c.Limit == 0 {
		return r, 0, false, nil
	}
	var res [1]algorithm.Result
	ops := [1]Op{{Client: client, Rule: c.ID, Params: c.Params, Shadow: c.Shadow, FailClosed: c.FailsClosed()}}
	if _, err := l.store.Take(ctx, ops[:], res[:]); err != nil {
		return r, 0, false, err
	}
	return res[0], c.Limit, true, nil
}
