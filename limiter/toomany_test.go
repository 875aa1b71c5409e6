package limiter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/seam/descriptor"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
)

// fullSet is MaxRulesPerCall rules that match every call, keyed by user,
// and one rule on the descriptor entry tenant: a call with a tenant entry
// matches one rule more than one decision applies.
func fullSet() *rules.Set {
	s := &rules.Set{}
	for i := range limiter.MaxRulesPerCall {
		s.Rules = append(s.Rules, rule(fmt.Sprintf("all-%d", i), 100, time.Minute, func(r *rules.Rule) { r.By = rules.ByUser }))
	}
	s.Rules = append(s.Rules, rule("tenant", 100, time.Minute, func(r *rules.Rule) {
		r.Match.Entries = []rules.Entry{{Key: "tenant"}}
		r.By = "entry:tenant"
	}))
	return s
}

// ownLimit is a descriptor's own limit as the Envoy API builds it.
// withOwn returns req with an Envoy descriptor whose own limit is own,
// in bucket, attached.
func withOwn(req limiter.Request, own *rules.Compiled, bucket string) limiter.Request {
	descriptor.Attach(&req, &descriptor.Descriptor{Own: own, OwnBucket: bucket})
	return req
}

func ownLimit(limit int64) *rules.Compiled {
	c := &rules.Compiled{Rule: rules.Rule{ID: "own", Limit: limit, Window: rules.Duration(time.Minute), Algorithm: algorithm.FixedWindow}}
	c.Params = c.Rule.Params()
	return c
}

// TestTooManyRulesDenies: a call that matches more rules than one atomic
// take holds — through its own limit or its descriptor entries, next to
// rules that already fill a decision — is denied (too_many_rules), takes
// nothing, and is never an error: the Envoy API would answer an error,
// which Envoy turns into "allow". Check, CheckMany and Reserve alike.
func TestTooManyRulesDenies(t *testing.T) {
	l, _ := newLimiter(t, fullSet())
	tenant := []rules.Entry{{Key: "tenant", Value: "acme"}}
	for name, req := range map[string]limiter.Request{
		"own limit": withOwn(limiter.Request{User: "alice", Method: "GET", Path: "/"}, ownLimit(10), "b"),
		"entries":   withEntries(limiter.Request{User: "carol", Method: "GET", Path: "/"}, tenant),
	} {
		t.Run(name, func(t *testing.T) {
			for i := range 3 {
				d, err := l.Check(context.Background(), &req)
				if err != nil || d.Allowed || d.Reason.String() != "too_many_rules" || d.Rule != nil || d.RetryAfter != 0 {
					t.Fatalf("Check %d = %+v, %v; want denied, too_many_rules, no rule, no retry", i+1, d, err)
				}
				ds := make([]limiter.Decision, 2)
				other := limiter.Request{User: "bob-" + req.User, Method: "GET", Path: "/"}
				err = l.CheckMany(context.Background(), []limiter.Request{req, other}, ds)
				if err != nil || ds[0].Allowed || ds[0].Reason.String() != "too_many_rules" {
					t.Fatalf("CheckMany %d = %+v, %v; want the first denied, too_many_rules", i+1, ds, err)
				}
				// All or nothing: bob's rules were read, not taken.
				if !ds[1].Allowed || ds[1].Remaining != 100 {
					t.Fatalf("CheckMany %d: bob = %+v, want allowed with 100 remaining (nothing taken)", i+1, ds[1])
				}
				d, wait, err := l.Reserve(context.Background(), &req, time.Second)
				if err != nil || d.Allowed || d.Reason.String() != "too_many_rules" || wait != 0 {
					t.Fatalf("Reserve %d = %+v, %v, %v; want denied, too_many_rules", i+1, d, wait, err)
				}
			}
			// Nothing was taken: the caller's buckets are whole.
			d := check(t, l, limiter.Request{User: req.User, Method: "GET", Path: "/"})
			if !d.Allowed || d.Remaining != 99 || d.Matched != limiter.MaxRulesPerCall {
				t.Fatalf("%s's call without them = %+v, want allowed with 99 remaining of %d rules", req.User, d, limiter.MaxRulesPerCall)
			}
		})
	}
}
