package limiter_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// TestUnlimited: an unlimited rule applies but takes nothing; the call is
// decided by the other rules, and with none it is allowed with no rule.
func TestUnlimited(t *testing.T) {
	l, _ := newLimiter(t, &rules.Set{Rules: []rules.Rule{
		{ID: "free", Unlimited: true, Match: rules.Match{Endpoint: "GET /health"}},
		rule("all", 2, time.Minute, func(r *rules.Rule) { r.By = rules.ByUser; r.Match.Endpoint = "* /api/*" }),
		{ID: "api-free", Unlimited: true, Match: rules.Match{Endpoint: "GET /api/free"}},
	}})
	for i := range 5 {
		d := check(t, l, limiter.Request{User: "u", Method: "GET", Path: "/health"})
		if !d.Allowed || d.Rule != nil || !d.Unlimited || d.Matched != 0 {
			t.Fatalf("call %d to an unlimited endpoint = %+v, want allowed, no rule, unlimited", i+1, d)
		}
	}
	// Next to a limited rule, the limited rule decides.
	for i := range 3 {
		d := check(t, l, limiter.Request{User: "u", Method: "GET", Path: "/api/free"})
		if d.Allowed != (i < 2) || d.RuleID() != "all" || !d.Unlimited {
			t.Fatalf("call %d = %+v, want allowed %v by rule all, unlimited", i+1, d, i < 2)
		}
	}
}

// TestLimitZero: a rule of limit 0 denies every call, never passes, and
// takes nothing from the call's other rules; as a shadow rule it only
// reports.
func TestLimitZero(t *testing.T) {
	for _, kind := range algorithm.Kinds() {
		t.Run(kind.String(), func(t *testing.T) {
			l, clock := newLimiter(t, &rules.Set{Rules: []rules.Rule{
				rule("blocked", 0, time.Minute, func(r *rules.Rule) {
					r.By = rules.ByIP
					r.Match.Endpoint = "* /blocked"
					r.Algorithm = kind
				}),
				rule("per-user", 5, time.Minute, func(r *rules.Rule) { r.By = rules.ByUser }),
				rule("shadow-zero", 0, time.Minute, func(r *rules.Rule) { r.Match.Endpoint = "* /shadow"; r.Shadow = true }),
			}})
			clock.Add(20_000_000) // 20 s into a minute
			for i := range 3 {
				d := check(t, l, limiter.Request{User: "u", IP: "192.0.2.1", Method: "GET", Path: "/blocked"})
				if d.Allowed || d.RuleID() != "blocked" || d.Limit != 0 || d.Remaining != 0 || d.Reason != algorithm.ReasonCostExceedsCapacity ||
					d.RetryAfter != 0 || d.ResetAfter != 40*time.Second {
					t.Fatalf("call %d = %+v, want denied by blocked: limit 0, remaining 0, cost exceeds capacity, reset in 40s", i+1, d)
				}
			}
			// Nothing was taken from per-user.
			if d := check(t, l, limiter.Request{User: "u", Method: "GET", Path: "/ok"}); !d.Allowed || d.RuleID() != "per-user" || d.Remaining != 4 {
				t.Fatalf("then = %+v, want per-user with 4 left", d)
			}
			d := check(t, l, limiter.Request{User: "u", Method: "GET", Path: "/shadow"})
			if !d.Allowed || d.ShadowDenied != "shadow-zero" || d.RuleID() != "per-user" || d.Remaining != 3 {
				t.Fatalf("shadow limit 0 = %+v, want allowed by per-user (3 left), shadow_denied shadow-zero", d)
			}
			// Reserve: never a slot.
			if kind == algorithm.TokenBucket || kind == algorithm.LeakyBucket {
				d, _, err := l.Reserve(t.Context(), &limiter.Request{IP: "192.0.2.1", Method: "GET", Path: "/blocked"}, time.Minute)
				if err != nil || d.Allowed || d.Reason != algorithm.ReasonCostExceedsCapacity || d.Limit != 0 {
					t.Fatalf("Reserve = %+v, %v, want a denial that never passes", d, err)
				}
			}
		})
	}
}

// TestReplaces: a rule a matching rule replaces does not apply — in one
// call (Check) and across the requests of CheckMany — and is not counted;
// a replaced rule still replaces.
func TestReplaces(t *testing.T) {
	set := &rules.Set{Rules: []rules.Rule{
		rule("read", 3, time.Minute, func(r *rules.Rule) { r.By = rules.ByUser; r.Match.Endpoint = "GET /api/*"; r.Name = "reads" }),
		rule("search", 10, time.Minute, func(r *rules.Rule) {
			r.By = rules.ByUser
			r.Match.Endpoint = "GET /api/search"
			r.Replaces = []string{"reads"}
		}),
		rule("a", 4, time.Minute, func(r *rules.Rule) {
			r.By = rules.ByUser
			r.Match.Endpoint = "GET /ab"
			r.Name = "A"
			r.Replaces = []string{"B"}
		}),
		rule("b", 4, time.Minute, func(r *rules.Rule) {
			r.By = rules.ByUser
			r.Match.Endpoint = "GET /ab"
			r.Name = "B"
			r.Replaces = []string{"A"}
		}),
		rule("c", 9, time.Minute, func(r *rules.Rule) { r.By = rules.ByUser; r.Match.Endpoint = "GET /ab"; r.Name = "C" }),
	}}
	l, _ := newLimiter(t, set)
	for i := range 5 {
		d := check(t, l, limiter.Request{User: "u", Method: "GET", Path: "/api/search"})
		if !d.Allowed || d.RuleID() != "search" || d.Remaining != int64(9-i) || d.Matched != 1 {
			t.Fatalf("search call %d = %+v, want allowed by search alone, %d left", i+1, d, 9-i)
		}
	}
	// read was never counted.
	if d := check(t, l, limiter.Request{User: "u", Method: "GET", Path: "/api/orders"}); d.RuleID() != "read" || d.Remaining != 2 {
		t.Fatalf("a read = %+v, want read with 2 left", d)
	}
	// Two rules that replace each other: neither applies, the third does.
	if d := check(t, l, limiter.Request{User: "u", Method: "GET", Path: "/ab"}); d.RuleID() != "c" || d.Matched != 1 {
		t.Fatalf("/ab = %+v, want c alone", d)
	}

	// CheckMany: the replacing rule of one request drops the replaced rule
	// of another.
	l, _ = newLimiter(t, set)
	ds := checkMany(t, l,
		limiter.Request{User: "u", Method: "GET", Path: "/api/orders"},
		limiter.Request{User: "u", Method: "GET", Path: "/api/search"})
	if ds[0].Rule != nil || !ds[0].Allowed || ds[1].RuleID() != "search" || ds[1].Remaining != 9 {
		t.Fatalf("CheckMany = %+v, %+v, want no rule for the read (replaced), search with 9 left", ds[0], ds[1])
	}
	if d := check(t, l, limiter.Request{User: "u", Method: "GET", Path: "/api/orders"}); d.RuleID() != "read" || d.Remaining != 2 {
		t.Fatalf("a read after = %+v, want read with 2 left: the replaced rule was not counted", d)
	}
}

// TestLimitZeroRedis: on the Redis store too, a rule of limit 0 denies
// every call, takes nothing from the call's other rules, and writes no
// bucket of its own.
func TestLimitZeroRedis(t *testing.T) {
	srv := redistest.Start(t)
	cfg := sredis.DefaultConfig()
	cfg.Addrs = []string{srv.Addr()}
	st, err := sredis.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var rs []rules.Rule
	for _, kind := range algorithm.Kinds() {
		rs = append(rs, rule("zero-"+kind.String(), 0, time.Minute, func(r *rules.Rule) {
			r.By = rules.ByIP
			r.Match.Endpoint = "* /" + kind.String()
			r.Algorithm = kind
		}))
	}
	rs = append(rs, rule("per-user", 5, time.Minute, func(r *rules.Rule) { r.By = rules.ByUser }))
	l := limitertest.Over(t, st, &rules.Set{Rules: rs})
	for _, kind := range algorithm.Kinds() {
		for i := range 3 {
			d := check(t, l, limiter.Request{User: "u", IP: "192.0.2.1", Method: "GET", Path: "/" + kind.String()})
			if d.Allowed || d.RuleID() != "zero-"+kind.String() || d.Limit != 0 || d.Remaining != 0 ||
				d.Reason != algorithm.ReasonCostExceedsCapacity || d.ResetAfter <= 0 || d.ResetAfter > time.Minute {
				t.Fatalf("%s call %d = %+v, want denied by its rule of limit 0, reset within a minute", kind, i+1, d)
			}
		}
	}
	if d := check(t, l, limiter.Request{User: "u", Method: "GET", Path: "/ok"}); !d.Allowed || d.RuleID() != "per-user" || d.Remaining != 4 {
		t.Fatalf("then = %+v, want per-user with 4 left: the denied calls took nothing", d)
	}
	keys, err := srv.Do("--scan", "--pattern", "*zero*")
	if err != nil || strings.TrimSpace(keys) != "" {
		t.Fatalf("Redis keys of the limit-0 rules: %q, %v; want none", keys, err)
	}
	if keys, err := srv.Do("--scan", "--pattern", "*per-user*"); err != nil || strings.TrimSpace(keys) == "" {
		t.Fatalf("Redis keys of per-user: %q, %v; want its bucket", keys, err)
	}
}
