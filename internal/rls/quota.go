package rls

import (
	"context"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
)

// Quota mode (rules.Rule.Quota, envoyproxy/ratelimit's quota_mode).
//
// A request's descriptor is a quota descriptor when the rule that decides
// it — its most restrictive — is a quota rule (and not a shadow one). As
// in envoyproxy/ratelimit, the request is OVER_LIMIT when a descriptor
// that is not a quota descriptor is over its limit, or when it has quota
// descriptors and every one of them is over its limit; a quota descriptor
// over its limit is reported OVER_LIMIT in its own status while the
// request passes. sluice keeps its own rule that a denied request takes
// nothing, and a passing one takes only from the rules that admit it:
//
//  1. every descriptor is read (limiter.Request.Peek, nothing taken): a
//     descriptor is over its limit when what remains of its deciding
//     rule is less than its cost;
//  2. a non-quota descriptor over its limit: the request is decided as
//     any other (all or nothing: OVER_LIMIT, nothing taken);
//  3. quota descriptors, all over their limits: OVER_LIMIT, nothing
//     taken, the statuses those reads;
//  4. else it is taken with the quota rules as shadow rules (one atomic
//     store operation): every other rule all or nothing, and each quota
//     rule when it admits; a quota rule over its limit takes nothing and
//     its descriptor's status is OVER_LIMIT.
//
// Between the read and the take, other requests may use up what a quota
// descriptor had left: the request then passes on its other rules with
// every quota rule over (no quota rule is ever taken past its limit).
// A request of one descriptor, or whose descriptors merge into one check,
// is decided as any other: its one quota descriptor is "every quota
// descriptor".

// quotaViews are the limiters of a rule set's quota domains, with their
// quota rules made shadow rules.
type quotaViews struct {
	ix     *rules.Index // the rule set with quota rules as shadow rules
	by     map[string]*limiter.Limiter
	root   *limiter.Limiter                     // the domains no rule names, when a quota rule names none
	limits []*rlsv3.RateLimitResponse_RateLimit // CurrentLimit of each rule of ix, by Seq
}

// view returns the quota view of domain, nil when its requests have no
// quota rule.
func (q *quotaViews) view(domain string) *limiter.Limiter {
	if l := q.by[domain]; l != nil {
		return l
	}
	return q.root
}

// newQuotaViews returns the quota views of ix, nil when no enabled rule
// is quota. A quota rule that names no domain is every domain's: then
// every domain some rule names has a view, and so do the others (root).
func (s *Server) newQuotaViews(ix *rules.Index) *quotaViews {
	var domains []string
	every := false
	for _, r := range ix.Rules() {
		if r.Quota && !r.Shadow && r.IsEnabled() {
			if r.Match.Domain == "" {
				every = true
			} else {
				domains = append(domains, r.Match.Domain)
			}
		}
	}
	if every {
		domains = ix.Domains()
	}
	if len(domains) == 0 && !every {
		return nil
	}
	set := ix.Set().Clone()
	for i := range set.Rules {
		if set.Rules[i].Quota {
			set.Rules[i].Shadow = true
		}
	}
	qix, err := rules.Compile(set)
	if err != nil { // a valid set stays valid with shadow rules; never in practice
		s.cfg.Logger.Error("rls: quota rules cannot be decided; they deny as plain limits", "err", err)
		return nil
	}
	qv := &quotaViews{ix: qix, by: make(map[string]*limiter.Limiter)}
	for _, d := range domains {
		if qv.by[d] == nil {
			l := limiter.New(s.store, s.cfg.Limiter)
			l.SetRules(qix.Domain(d))
			qv.by[d] = l
		}
	}
	if every {
		qv.root = limiter.New(s.store, s.cfg.Limiter)
		qv.root.SetRules(qix)
	}
	qv.limits = make([]*rlsv3.RateLimitResponse_RateLimit, len(qix.Rules()))
	for i, r := range qix.Rules() {
		qv.limits[i] = CurrentLimit(r)
	}
	return qv
}

// limit returns the cached CurrentLimit of r, a rule of the original set
// or of its quota view.
func (vs *views) quotaLimit(r *rules.Compiled) *rlsv3.RateLimitResponse_RateLimit {
	if l := vs.limit(r); l != nil {
		return l
	}
	if q := vs.quota; q != nil && r != nil && r.Seq < len(q.limits) && q.ix.Rules()[r.Seq] == r {
		return q.limits[r.Seq]
	}
	return nil
}

// fromQuota puts in ds, in place of each rule of the quota view, the
// same rule of the rule set (they have the same Seq), so that statuses and
// counts name the rule in force.
func (vs *views) fromQuota(ds []limiter.Decision) {
	for i := range ds {
		if r := ds[i].Rule; r != nil && vs.quota != nil && r.Seq < len(vs.quota.ix.Rules()) && vs.quota.ix.Rules()[r.Seq] == r {
			ds[i].Rule = vs.ix.Rules()[r.Seq]
		}
	}
}

// decideQuota decides calls, the descriptors of a request to a domain
// with quota rules, as the package doc of quota mode says. It returns
// each descriptor's decision, whether each is reported OVER_LIMIT, and
// whether the request is OVER_LIMIT; handled is false when the request is
// to be decided as any other (step 2).
func (s *Server) decideQuota(ctx context.Context, lim, qlim *limiter.Limiter, calls []call) (ds []limiter.Decision, over []bool, denied, handled bool, err error) {
	reqs := make([]limiter.Request, len(calls))
	for i := range calls {
		reqs[i] = calls[i].req
		reqs[i].Peek = true
	}
	ds = make([]limiter.Decision, len(calls))
	if err := lim.CheckMany(ctx, reqs, ds); err != nil {
		return nil, nil, false, false, s.unavailable(ctx, err)
	}
	over = make([]bool, len(calls))
	quotas, quotasOver := 0, 0
	for i := range ds {
		d := &ds[i]
		cost := max(calls[i].req.Cost, 1)
		if calls[i].req.Peek {
			cost = 0
		}
		over[i] = !d.Allowed || d.Rule != nil && d.Remaining < cost
		quota := d.Rule != nil && d.Rule.Quota && !d.Rule.Shadow
		switch {
		case over[i] && !quota:
			return nil, nil, false, false, nil // step 2
		case quota:
			quotas++
			if over[i] {
				quotasOver++
			}
		}
	}
	if quotas > 0 && quotas == quotasOver { // step 3
		for i := range ds {
			ds[i].Allowed = ds[i].Allowed && !over[i]
		}
		return ds, over, true, true, nil
	}
	// Step 4.
	for i := range calls {
		reqs[i] = calls[i].req
	}
	if err := qlim.CheckMany(ctx, reqs, ds); err != nil {
		return nil, nil, false, false, s.unavailable(ctx, err)
	}
	for i := range ds {
		d := &ds[i]
		over[i] = !d.Allowed || d.ShadowDenied != "" && isQuota(d, qlim)
		denied = denied || !d.Allowed
	}
	return ds, over, denied, true, nil
}

// isQuota reports whether the shadow rule that would have denied d is a
// quota rule of lim's rules.
func isQuota(d *limiter.Decision, lim *limiter.Limiter) bool {
	for _, r := range lim.Rules().Rules() {
		if r.ID == d.ShadowDenied {
			return r.Quota
		}
	}
	return false
}
