package limiter

import (
	"context"
	"errors"
	"strings"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/seam/descriptor"
	"github.com/sluicehq/sluice/internal/seam/dryrun"
	"github.com/sluicehq/sluice/rules"
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
	// Decision is what Check would decide for the call's cost now, as
	// Check reports it (Remaining after the cost).
	Decision Decision
}

// ExplainedBucket is one bucket of an Explanation.
type ExplainedBucket struct {
	Rule   string // rule id
	Client string // the bucket's client id, e.g. "user:alice", "ip:2001:db8::/64"
	Shadow bool   // a shadow rule: never vetoes the call
	Limit  int64
	// Result is the bucket read with cost 0: Remaining is what is left
	// (0 for a rule of limit 0), ResetAfter the time until it is whole;
	// when the bucket would refuse the call, Reason and RetryAfter say
	// why and for how long.
	Result algorithm.Result
	// Allows: the call's cost would pass this bucket now.
	Allows bool
}

// Explain decides req as Check decides it — the same rules, replaces
// and buckets, the same judgement — without taking anything: every
// bucket the call would take from is read (an op of cost 0, as a
// Request.Peek) and judged for the cost the take would carry (req.Cost;
// 0 means 1, or nothing with Request.Peek). Its Decision is what Check
// would answer now, Remaining after the call's cost; a rule of limit 0
// reads 0 of 0 and denies. A call that matches too many rules is
// explained as the denial Check makes (tooMany).
func (l *Limiter) Explain(ctx context.Context, req *Request) (Explanation, error) {
	rec := new(dryrun.Recorder)
	var desc descriptor.Descriptor
	if req.desc != nil {
		desc = *req.desc
	}
	desc.Dry = rec
	dry := *req
	dry.desc = &desc
	if _, err := l.Check(ctx, &dry); err != nil {
		return Explanation{}, err
	}
	return rec.Explained[0].(Explanation), nil
}

// checkDry is Check as a dry run (package dryrun) recorded in rec: planned
// and folded as Check plans and folds it, its buckets read and judged
// (read), nothing taken. Apart from Check so that a real call pays
// nothing for it.
func (l *Limiter) checkDry(ctx context.Context, ix *rules.Index, req *Request, rec *dryrun.Recorder) (Decision, error) {
	sc := l.scratch.Get().(*scratch)
	defer l.scratch.Put(sc)
	var d Decision
	var raw []algorithm.Result
	ops, err := l.plan(ix, req, sc, &d)
	switch {
	case err == nil && len(ops) > 0:
		raw = make([]algorithm.Result, len(ops))
		info, err := l.read(ctx, ops, sc.res[:len(ops)], raw)
		if err != nil {
			return Decision{}, err
		}
		fold(&d, sc, len(ops), info)
	case errors.Is(err, ErrTooManyRules):
		d, sc.kept, ops = tooMany(sc), nil, nil
	case err != nil:
		return Decision{}, err
	}
	rec.Explained = []any{explanation(sc, ops, raw, &d)}
	return d, nil
}

// read is the take of a dry run (package dryrun): every op read at cost 0
// into raw, nothing taken, and res what the take of ops would have
// answered (judge).
func (l *Limiter) read(ctx context.Context, ops []Op, res, raw []algorithm.Result) (TakeInfo, error) {
	peek := make([]Op, len(ops))
	copy(peek, ops)
	for i := range peek {
		peek[i].Cost = 0
	}
	info, err := l.store.Take(ctx, peek, raw)
	if err != nil {
		return info, err
	}
	for i := range ops {
		res[i] = judge(&ops[i], raw[i])
	}
	return info, nil
}

// judge returns what a take of op would answer on a bucket whose read at
// cost 0 is r: allowed when r allows and the cost fits, Remaining lowered
// by the cost (as an allowed take of an integer cost leaves it; see
// asItStands); else denied, Remaining what stands — cost_exceeds_capacity
// when the cost is beyond the bucket's capacity — and for a charge
// (algorithm.Params.Charge), which the take counts into debt, Remaining
// 0. RetryAfter of a denial is an upper bound: the time until the bucket
// is whole.
func judge(op *Op, r algorithm.Result) algorithm.Result {
	c := op.Cost
	switch {
	case c == 0:
		return r
	case r.Allowed && r.Remaining >= c:
		r.Remaining -= c
		return r
	case op.Params.Charge:
		return algorithm.Result{Reason: algorithm.ReasonLimited, ResetAfter: r.ResetAfter, RetryAfter: r.ResetAfter}
	}
	r.Allowed, r.Reason = false, algorithm.ReasonLimited
	if c > op.Params.Capacity() {
		r.Reason = algorithm.ReasonCostExceedsCapacity
	} else {
		r.RetryAfter = r.ResetAfter
	}
	return r
}

// explanation is the Explanation of the call planned in sc (its rules in
// sc.kept), of the ops built there, read as raw (nil when no op), and of
// its decision d.
func explanation(sc *scratch, ops []Op, raw []algorithm.Result, d *Decision) Explanation {
	ex := Explanation{Plan: sc.plan, Decision: *d}
	for _, r := range sc.kept {
		ex.Matched = append(ex.Matched, r.ID)
	}
	for j := range ops {
		b := ExplainedBucket{Rule: ops[j].Rule, Client: strings.Clone(ops[j].Client), Shadow: ops[j].Shadow,
			Limit: sc.used[j].Limit, Result: raw[j], Allows: sc.res[j].Allowed}
		if !b.Allows { // why and how long, as the take would say
			b.Result.Allowed, b.Result.Reason, b.Result.RetryAfter = false, sc.res[j].Reason, sc.res[j].RetryAfter
		}
		if b.Limit == 0 { // read as a bucket of 1 (see ops): nothing remains of 0
			b.Result.Remaining = 0
		}
		ex.Buckets = append(ex.Buckets, b)
	}
	return ex
}

// explainMany is the Explanation of each request of a dry run of
// CheckMany: scs their scratch, n their ops, denied those that match
// too many rules, ds their decisions, and raw the reads of the one take.
func explainMany(scs []*scratch, n []int, denied []bool, ds []Decision, raw []algorithm.Result) []any {
	out := make([]any, len(scs))
	for i, sc := range scs {
		if denied[i] {
			out[i] = Explanation{Plan: sc.plan, Decision: ds[i]}
			continue
		}
		mine := make([]algorithm.Result, n[i])
		for j := range mine {
			mine[j] = raw[sc.at[j]]
		}
		out[i] = explanation(sc, sc.ops[:n[i]], mine, &ds[i])
	}
	return out
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
