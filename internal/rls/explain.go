package rls

import (
	"context"
	"slices"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/seam/dryrun"
	"github.com/sluicehq/sluice/limiter"
)

// Explained is one check of a request Explain explained: one descriptor,
// or several united into one check as ShouldRateLimit unites them.
type Explained struct {
	// Descriptors are the indexes of the request's descriptors it covers.
	Descriptors []int
	// Empty: the descriptor has no entries; it is OK and counts nothing.
	Empty bool
	// Over: ShouldRateLimit would report the descriptors OVER_LIMIT. It is
	// !Explanation.Decision.Allowed, except in quota mode, where a quota
	// descriptor over its limit is reported OVER_LIMIT while the request
	// passes on another (quota.go).
	Over        bool
	Explanation limiter.Explanation
}

// explaining collects, in a dry run of decide, each check's final
// decision and its code, in the order decide makes them.
type explaining struct {
	rec    *dryrun.Recorder // every call's (descriptor.Descriptor.Dry)
	checks []explainedCheck
}

type explainedCheck struct {
	d    limiter.Decision
	over bool
}

// Explain says what ShouldRateLimit would answer req now, without taking
// anything: it runs ShouldRateLimit's own decision (decide) as a dry run
// (package dryrun: every bucket read and judged for its cost, nothing
// taken, nothing counted), so that every case it handles — the request's
// domain, hits_addend, each descriptor's own limit, an unregistered API
// key dropped, descriptors united into one check or decided all or
// nothing in one, replaces across descriptors, quota mode, limit 0,
// shadow rules, charges — is explained as decided. Each check has its
// rules, buckets and their state (limiter.Explanation) and the code its
// descriptors would get; over is whether the overall code would be
// OVER_LIMIT. The error is an InvalidArgument status naming the field of
// a malformed request, Unavailable when nothing can be read.
func (s *Server) Explain(ctx context.Context, req *rlsv3.RateLimitRequest) (_ []Explained, over bool, _ error) {
	calls := make([]call, len(req.GetDescriptors()))
	rec, ex := new(dryrun.Recorder), new(explaining)
	ex.rec = rec
	resp, _, err := s.decide(ctx, req, calls, ex)
	if err != nil {
		return nil, false, err
	}
	var out []Explained
	var at []int
	for i := range calls {
		if calls[i].empty {
			out = append(out, Explained{Descriptors: []int{i}, Empty: true})
		} else {
			at = append(at, i)
		}
	}
	for j, c := range ex.checks {
		e := Explained{Over: c.over}
		if len(ex.checks) == 1 {
			e.Descriptors = at
		} else {
			e.Descriptors = []int{at[j]}
		}
		if j < len(rec.Explained) {
			e.Explanation = rec.Explained[j].(limiter.Explanation)
		}
		e.Explanation.Decision = c.d
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Explained) int { return a.Descriptors[0] - b.Descriptors[0] })
	return out, resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT, nil
}
