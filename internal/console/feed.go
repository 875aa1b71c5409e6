package console

import (
	"context"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/identity"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
)

// Feed counts the denials of the decision APIs (the check API, the Envoy
// API, the gateway) into a Hitters, each under the bucket its rule took
// from: the caller for a rule keyed by one ("user:alice"), else the
// bucket's id as the limiter builds it ("global", "endpoint:GET
// /api/orders", "header:x-tenant=acme", "entry:generic_key=checkout", and
// their combinations). It works on the denial path only, and only for the
// denials the Hitters samples (Hitters.weight); an allowed call never
// reaches it.
type Feed struct {
	h     *Hitters
	rules func() *rules.Index
	// keys plans calls as the deciding limiter does, over a store that
	// takes nothing: its Explain names a rule's bucket for a call.
	keys *limiter.Limiter
}

// NewFeed returns a feed of h. rules returns the rules in force (those the
// deciding limiters follow); cfg is theirs (the IPv6 prefix callers are
// keyed by).
func NewFeed(h *Hitters, rules func() *rules.Index, cfg limiter.Config) *Feed {
	return &Feed{h: h, rules: rules, keys: limiter.New(noTake{}, cfg)}
}

// Denied counts d, the denial of req by d.Rule (nothing for a denial
// without a rule). It keeps neither. A denial the summary does not sample
// costs a call, a branch and Hitters.weight.
func (f *Feed) Denied(d *limiter.Decision, req *limiter.Request) {
	if d.Rule != nil {
		if w := f.h.weight(); w != 0 {
			f.count(d, req, w)
		}
	}
}

// count counts a denial that weighs w under its bucket.
func (f *Feed) count(d *limiter.Decision, req *limiter.Request, w uint64) {
	if ix := f.rules(); ix != nil && f.keys.Rules() != ix {
		f.keys.SetRules(ix)
	}
	var buf [identity.MaxID]byte
	switch d.KeyedBy {
	case rules.ByUser, rules.ByAPIKey, rules.ByIP: // the caller: built as the limiter built it
		f.h.add(d.Rule.ID, bytesString(f.keys.AppendClientID(buf[:0], d.KeyedBy, req)), w)
	default:
		f.h.add(d.Rule.ID, f.bucket(d, req), w)
	}
}

// bucket returns the id of the bucket d.Rule took from for req, planned
// again; "" when the rules changed meanwhile and no longer name it.
func (f *Feed) bucket(d *limiter.Decision, req *limiter.Request) string {
	ex, err := f.keys.Explain(context.Background(), req)
	if err != nil {
		return ""
	}
	for _, b := range ex.Buckets {
		if b.Rule == d.Rule.ID {
			return b.Client
		}
	}
	return ""
}

// Observe returns what a decision path that reports every decision (the
// gateway's, through its middleware) tells: the decision counted in m (the
// console's rates), a denial fed to f.
func Observe(m *metrics.Metrics, f *Feed) func(d limiter.Decision, req limiter.Request) {
	return func(d limiter.Decision, req limiter.Request) {
		m.Decision(&d)
		if !d.Allowed {
			f.Denied(&d, &req)
		}
	}
}

// noTake is a store that takes and reads nothing: every op passes.
type noTake struct{}

func (noTake) Take(_ context.Context, ops []limiter.Op, res []algorithm.Result) (limiter.TakeInfo, error) {
	for i := range ops {
		res[i] = algorithm.Result{Allowed: true}
	}
	return limiter.TakeInfo{}, nil
}
