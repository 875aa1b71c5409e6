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
	h   *Hitters
	cfg limiter.Config
}

// NewFeed returns a feed of h; cfg is the deciding limiters' (the IPv6
// prefix callers are keyed by).
func NewFeed(h *Hitters, cfg limiter.Config) *Feed { return &Feed{h: h, cfg: cfg} }

// Denied counts d, the denial of req by d.Rule under the rules of lim,
// the limiter that decided it (nothing for a denial without a rule). It
// keeps none of them. A denial the summary does not sample costs a call,
// a branch and Hitters.weight.
func (f *Feed) Denied(lim *limiter.Limiter, d *limiter.Decision, req *limiter.Request) {
	if d.Rule != nil {
		if w := f.h.weight(); w != 0 {
			f.count(lim, d, req, w)
		}
	}
}

// count counts a denial that weighs w under its bucket.
func (f *Feed) count(lim *limiter.Limiter, d *limiter.Decision, req *limiter.Request, w uint64) {
	var buf [identity.MaxID]byte
	switch d.KeyedBy {
	case rules.ByUser, rules.ByAPIKey, rules.ByIP: // the caller: built as the limiter built it
		f.h.add(d.Rule.ID, bytesString(lim.AppendClientID(buf[:0], d.KeyedBy, req)), w)
	default:
		f.h.add(d.Rule.ID, f.bucket(lim, d, req), w)
	}
}

// bucket returns the id of the bucket d.Rule took from for req, planned
// again under lim's rules (a domain's, for the Envoy API) by a limiter
// over a store that takes nothing; "" when the rules changed meanwhile
// and no longer name it.
func (f *Feed) bucket(lim *limiter.Limiter, d *limiter.Decision, req *limiter.Request) string {
	keys := limiter.New(noTake{}, f.cfg)
	keys.SetRules(lim.Rules())
	ex, err := keys.Explain(context.Background(), req)
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
// gateway's, through its middleware, deciding with lim) tells: the
// decision counted in m (the console's rates), a denial fed to f.
func Observe(m *metrics.Metrics, f *Feed, lim *limiter.Limiter) func(d limiter.Decision, req limiter.Request) {
	return func(d limiter.Decision, req limiter.Request) {
		m.Decision(&d)
		if !d.Allowed {
			f.Denied(lim, &d, &req)
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
