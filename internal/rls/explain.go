package rls

import (
	"context"
	"slices"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/limiter"
)

// Explained is one check of a request Explain explained: one descriptor,
// or several united into one check as ShouldRateLimit unites them.
type Explained struct {
	// Descriptors are the indexes of the request's descriptors it covers.
	Descriptors []int
	// Empty: the descriptor has no entries; it is OK and counts nothing.
	Empty       bool
	Explanation limiter.Explanation
}

// Explain says what ShouldRateLimit would answer req now, without taking
// anything: each descriptor's rules, buckets with their state and
// decision (limiter.Explain), planned as ShouldRateLimit plans them — the
// request's domain, its hits_addend, each descriptor's own limit, an
// unregistered API key dropped, descriptors united into one check when it
// unites them — and whether the overall code would be OVER_LIMIT. A
// domain in quota mode is explained as checks. The error is an
// InvalidArgument status naming the field of a malformed request.
func (s *Server) Explain(ctx context.Context, req *rlsv3.RateLimitRequest) (_ []Explained, over bool, _ error) {
	calls := make([]call, len(req.GetDescriptors()))
	if err := parse(req, calls); err != nil {
		return nil, false, err
	}
	vs := s.views.Load()
	if vs == nil {
		return nil, false, status.Error(codes.Unavailable, "rls: no rules loaded yet")
	}
	lim := vs.prepare(req, calls)
	var out []Explained
	var live []call
	var at []int
	for i := range calls {
		if calls[i].empty {
			out = append(out, Explained{Descriptors: []int{i}, Empty: true})
			continue
		}
		live, at = append(live, calls[i]), append(at, i)
	}
	if len(live) == 0 {
		return out, false, nil
	}
	var merged call
	checks, covers := live, [][]int{}
	if len(live) > 1 && !vs.entries && merge(live, &merged) {
		checks, covers = []call{merged}, [][]int{at}
	} else {
		for _, i := range at {
			covers = append(covers, []int{i})
		}
	}
	for j := range checks {
		ex, err := lim.Explain(ctx, &checks[j].req)
		if err != nil {
			return nil, false, s.unavailable(ctx, err)
		}
		over = over || !ex.Decision.Allowed
		out = append(out, Explained{Descriptors: covers[j], Explanation: ex})
	}
	slices.SortFunc(out, func(a, b Explained) int { return a.Descriptors[0] - b.Descriptors[0] })
	return out, over, nil
}
