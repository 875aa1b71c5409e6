package limiter_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/identity"
	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/memory"
)

const base = int64(1_700_006_400_000_000)

func newLimiter(t testing.TB, s *rules.Set) (*limiter.Limiter, *atomic.Int64) {
	t.Helper()
	var clock atomic.Int64
	clock.Store(base)
	l, _ := limitertest.New(t, s, memory.Config{Clock: clock.Load, SweepInterval: -1})
	return l, &clock
}

func rule(id string, limit int64, window time.Duration, mod func(*rules.Rule)) rules.Rule {
	r := rules.Rule{ID: id, Limit: limit, Window: rules.Duration(window)}
	if mod != nil {
		mod(&r)
	}
	return r
}

func check(t *testing.T, l *limiter.Limiter, req limiter.Request) limiter.Decision {
	t.Helper()
	d, err := l.Check(context.Background(), &req)
	if err != nil {
		t.Fatalf("Check(%+v): %v", req, err)
	}
	return d
}

func TestSeedScenario(t *testing.T) {
	l, clock := newLimiter(t, &rules.Set{Rules: []rules.Rule{
		rule("seed", 1, time.Second, func(r *rules.Rule) { r.Burst = 10 }),
	}})
	req := limiter.Request{User: "alice", Method: "GET", Path: "/api/orders"}
	for i := 0; i < 10; i++ {
		if d := check(t, l, req); !d.Allowed || d.Remaining != int64(9-i) {
			t.Fatalf("call %d = allowed %v remaining %d, want true %d", i+1, d.Allowed, d.Remaining, 9-i)
		}
	}
	d := check(t, l, req)
	if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > time.Second || d.RuleID() != "seed" || d.KeyedBy != rules.ByUser {
		t.Fatalf("11th call = %+v, want denied with retry in (0, 1s] by seed for the user", d)
	}
	clock.Add(int64(time.Second / time.Microsecond))
	if d := check(t, l, req); !d.Allowed {
		t.Fatalf("a second later = %+v, want allowed", d)
	}
	if d := check(t, l, req); d.Allowed {
		t.Fatalf("and again = %+v, want denied", d)
	}
}

// TestAllOrNothing: a call denied by one rule consumes nothing from the
// others, whichever identity they are keyed by.
func TestAllOrNothing(t *testing.T) {
	l, _ := newLimiter(t, &rules.Set{Rules: []rules.Rule{
		rule("per-user", 3, time.Minute, func(r *rules.Rule) { r.By = rules.ByUser }),
		rule("per-ip", 2, time.Minute, func(r *rules.Rule) { r.By = rules.ByIP }),
	}})
	for i := 0; i < 2; i++ {
		check(t, l, limiter.Request{User: "bob", IP: "198.51.100.1"})
	}
	// per-ip is empty now: these are denied and must not take from per-user.
	for i := 0; i < 10; i++ {
		d := check(t, l, limiter.Request{User: "bob", IP: "198.51.100.1"})
		if d.Allowed || d.RuleID() != "per-ip" || d.KeyedBy != rules.ByIP {
			t.Fatalf("call = %+v, want denied by per-ip", d)
		}
	}
	// per-user still has 1 of 3: this call takes it (and shows it as the
	// most restrictive, 0 left against per-ip's 1).
	d := check(t, l, limiter.Request{User: "bob", IP: "198.51.100.2"})
	if !d.Allowed || d.RuleID() != "per-user" || d.Remaining != 0 {
		t.Fatalf("from another IP = allowed %v rule %q remaining %d, want true per-user 0", d.Allowed, d.RuleID(), d.Remaining)
	}
}

func TestShadowNeverDenies(t *testing.T) {
	l, _ := newLimiter(t, &rules.Set{Rules: []rules.Rule{
		rule("enforced", 100, time.Minute, nil),
		rule("trial", 1, time.Minute, func(r *rules.Rule) { r.Shadow = true }),
	}, Clients: registered("k1")})
	req := limiter.Request{APIKey: "k1"}
	if d := check(t, l, req); !d.Allowed || d.ShadowDenied != "" {
		t.Fatalf("first = %+v", d)
	}
	d := check(t, l, req)
	if !d.Allowed || d.ShadowDenied != "trial" || d.RuleID() != "enforced" || d.Remaining != 98 {
		t.Fatalf("second = allowed %v shadow %q rule %q remaining %d, want true trial enforced 98", d.Allowed, d.ShadowDenied, d.RuleID(), d.Remaining)
	}
}

func TestPlansAndEndpoints(t *testing.T) {
	s := &rules.Set{
		DefaultPlan: "free",
		Rules: []rules.Rule{
			rule("free", 1, time.Minute, func(r *rules.Rule) { r.Match.Plan = "free" }),
			rule("partner", 1000, time.Minute, func(r *rules.Rule) { r.Match.Plan = "partner" }),
			rule("login", 3, time.Minute, func(r *rules.Rule) { r.Match.Endpoint = "POST /login"; r.By = rules.ByIP }),
		},
		Clients: map[string]rules.Client{"api_key:k_live_42": {Plan: "partner"}},
	}
	l, _ := newLimiter(t, s)
	tests := []struct {
		req      limiter.Request
		wantRule string
		wantPlan string
		matched  int
	}{
		{limiter.Request{User: "u1"}, "free", "free", 1},
		{limiter.Request{APIKey: "k_live_42"}, "partner", "partner", 1},
		{limiter.Request{APIKey: "k_live_42", Plan: "free"}, "free", "free", 1},
		{limiter.Request{IP: "203.0.113.9", Method: "POST", Path: "/login"}, "free", "free", 2},
		{limiter.Request{User: "u2", Method: "POST", Path: "/login"}, "free", "free", 1}, // no IP: the per-ip rule cannot apply
	}
	for _, tt := range tests {
		d := check(t, l, tt.req)
		if d.RuleID() != tt.wantRule || d.Plan != tt.wantPlan || d.Matched != tt.matched {
			t.Errorf("Check(%+v) = rule %q plan %q matched %d, want %q %q %d", tt.req, d.RuleID(), d.Plan, d.Matched, tt.wantRule, tt.wantPlan, tt.matched)
		}
	}
}

func TestNoRuleAllows(t *testing.T) {
	l, _ := newLimiter(t, &rules.Set{})
	d := check(t, l, limiter.Request{User: "x"})
	if !d.Allowed || d.Rule != nil || d.Matched != 0 {
		t.Fatalf("Check = %+v, want allowed with no rule", d)
	}
}

func TestCostAboveCapacity(t *testing.T) {
	l, _ := newLimiter(t, &rules.Set{Rules: []rules.Rule{rule("r", 5, time.Second, nil)}})
	d := check(t, l, limiter.Request{User: "x", Cost: 6})
	if d.Allowed || d.Reason != algorithm.ReasonCostExceedsCapacity || d.RetryAfter != 0 {
		t.Fatalf("Check(cost 6) = %+v, want denied, cost_exceeds_capacity, no retry", d)
	}
	if d := check(t, l, limiter.Request{User: "x", Cost: 5}); !d.Allowed {
		t.Fatalf("Check(cost 5) = %+v, want allowed: the denied call took nothing", d)
	}
}

// TestRuleEditApplies: a raised limit takes effect on existing buckets at
// once. A bucket emptied under one call an hour holds an hour of debt; the
// rule edited to one call a second reads that debt at the new rate, so the
// caller waits a second for its next call, not the old rule's hour.
func TestRuleEditApplies(t *testing.T) {
	l, clock := newLimiter(t, &rules.Set{Rules: []rules.Rule{rule("r", 1, time.Hour, nil)}})
	req := limiter.Request{User: "x"}
	if d := check(t, l, req); !d.Allowed {
		t.Fatalf("first call = %+v, want allowed", d)
	}
	if d := check(t, l, req); d.Allowed || d.RetryAfter <= time.Hour-time.Second {
		t.Fatalf("second call under 1/h = %+v, want denied for about an hour", d)
	}

	setRules(t, l, &rules.Set{Revision: 2, Rules: []rules.Rule{rule("r", 3600, time.Hour, nil)}})
	// The hour of debt is a whole bucket of 3600 at one a second: empty,
	// with the next token a second away.
	d := check(t, l, req)
	if d.Allowed || d.RetryAfter != time.Second || d.Limit != 3600 || d.Remaining != 0 {
		t.Fatalf("right after the edit to 3600/h = allowed %v retry %v limit %d remaining %d, want denied, retry 1s, 3600, 0",
			d.Allowed, d.RetryAfter, d.Limit, d.Remaining)
	}
	clock.Add(int64(time.Second / time.Microsecond))
	if d := check(t, l, req); !d.Allowed {
		t.Fatalf("a second after the edit = %+v, want allowed: the new rule refills one a second", d)
	}
	if d := check(t, l, req); d.Allowed {
		t.Fatalf("and again in the same instant = %+v, want denied: one second refilled one call", d)
	}
}

// setRules compiles s and puts it in force on l.
func setRules(t *testing.T, l *limiter.Limiter, s *rules.Set) {
	t.Helper()
	l.SetRules(limitertest.Compile(t, s))
}

// TestRuleChangesApplyAtOnce: every kind of rule change decides the next
// call, on buckets that already exist, with no time passing. Fixed windows
// keep their counts against the new limit, so the numbers are exact.
func TestRuleChangesApplyAtOnce(t *testing.T) {
	fw := func(id string, limit int64, mod func(*rules.Rule)) rules.Rule {
		return rule(id, limit, time.Hour, func(r *rules.Rule) {
			r.Algorithm = algorithm.FixedWindow
			if mod != nil {
				mod(r)
			}
		})
	}
	req := limiter.Request{User: "alice", Method: "GET", Path: "/api/orders"}
	// take makes n calls and reports how many were allowed.
	take := func(t *testing.T, l *limiter.Limiter, n int) int {
		t.Helper()
		allowed := 0
		for range n {
			if check(t, l, req).Allowed {
				allowed++
			}
		}
		return allowed
	}

	t.Run("raised limit lets more calls through", func(t *testing.T) {
		l, _ := newLimiter(t, &rules.Set{Revision: 1, Rules: []rules.Rule{fw("r", 2, nil)}})
		if got := take(t, l, 3); got != 2 {
			t.Fatalf("under limit 2: %d of 3 calls allowed, want 2", got)
		}
		setRules(t, l, &rules.Set{Revision: 2, Rules: []rules.Rule{fw("r", 5, nil)}})
		if got := take(t, l, 5); got != 3 {
			t.Fatalf("raised to 5 after 2 calls: %d of 5 calls allowed, want 3", got)
		}
	})
	t.Run("lowered limit denies", func(t *testing.T) {
		l, _ := newLimiter(t, &rules.Set{Revision: 1, Rules: []rules.Rule{fw("r", 5, nil)}})
		if got := take(t, l, 2); got != 2 {
			t.Fatalf("under limit 5: %d of 2 calls allowed, want 2", got)
		}
		setRules(t, l, &rules.Set{Revision: 2, Rules: []rules.Rule{fw("r", 2, nil)}})
		d := check(t, l, req)
		if d.Allowed || d.RuleID() != "r" || d.Limit != 2 {
			t.Fatalf("lowered to 2 after 2 calls = allowed %v rule %q limit %d, want denied by r, limit 2", d.Allowed, d.RuleID(), d.Limit)
		}
	})
	t.Run("removed rule stops limiting", func(t *testing.T) {
		l, _ := newLimiter(t, &rules.Set{Revision: 1, Rules: []rules.Rule{fw("r", 1, nil)}})
		if got := take(t, l, 2); got != 1 {
			t.Fatalf("under limit 1: %d of 2 calls allowed, want 1", got)
		}
		setRules(t, l, &rules.Set{Revision: 2})
		d := check(t, l, req)
		if !d.Allowed || d.Rule != nil || d.Matched != 0 {
			t.Fatalf("after the rule's removal = allowed %v rule %q matched %d, want allowed by no rule", d.Allowed, d.RuleID(), d.Matched)
		}
	})
	t.Run("disabled rule stops limiting", func(t *testing.T) {
		l, _ := newLimiter(t, &rules.Set{Revision: 1, Rules: []rules.Rule{fw("r", 1, nil)}})
		take(t, l, 1)
		off := false
		setRules(t, l, &rules.Set{Revision: 2, Rules: []rules.Rule{fw("r", 1, func(r *rules.Rule) { r.Enabled = &off })}})
		if d := check(t, l, req); !d.Allowed || d.Rule != nil {
			t.Fatalf("after disabling r = allowed %v rule %q, want allowed by no rule", d.Allowed, d.RuleID())
		}
	})
	t.Run("new rule starts limiting", func(t *testing.T) {
		l, _ := newLimiter(t, &rules.Set{Revision: 1})
		if got := take(t, l, 3); got != 3 {
			t.Fatalf("with no rules: %d of 3 calls allowed, want 3", got)
		}
		setRules(t, l, &rules.Set{Revision: 2, Rules: []rules.Rule{fw("orders", 1, func(r *rules.Rule) { r.Match.Endpoint = "GET /api/orders" })}})
		if got := take(t, l, 3); got != 1 {
			t.Fatalf("after adding orders (limit 1): %d of 3 calls allowed, want 1", got)
		}
		if d := check(t, l, req); d.Allowed || d.RuleID() != "orders" {
			t.Fatalf("next call = allowed %v rule %q, want denied by orders", d.Allowed, d.RuleID())
		}
	})
	t.Run("new plan for a client applies", func(t *testing.T) {
		l, _ := newLimiter(t, &rules.Set{Revision: 1, DefaultPlan: "free", Rules: []rules.Rule{
			fw("free", 1, func(r *rules.Rule) { r.Match.Plan = "free" }),
			fw("pro", 100, func(r *rules.Rule) { r.Match.Plan = "pro" }),
		}})
		if got := take(t, l, 2); got != 1 {
			t.Fatalf("on plan free: %d of 2 calls allowed, want 1", got)
		}
		s := &rules.Set{Revision: 2, DefaultPlan: "free", Rules: []rules.Rule{
			fw("free", 1, func(r *rules.Rule) { r.Match.Plan = "free" }),
			fw("pro", 100, func(r *rules.Rule) { r.Match.Plan = "pro" }),
		}, Clients: map[string]rules.Client{"user:alice": {Plan: "pro"}}}
		setRules(t, l, s)
		d := check(t, l, req)
		if !d.Allowed || d.Plan != "pro" || d.RuleID() != "pro" {
			t.Fatalf("registered on pro = allowed %v plan %q rule %q, want allowed on pro by pro", d.Allowed, d.Plan, d.RuleID())
		}
	})
}

// TestSetRulesWhileDeciding: rules swapped while calls are decided (run
// with -race): each decision is made under one rule set whole — its rule's
// limit is the limit it reports — and once SetRules returns, the next call
// is decided under the set it put in force.
func TestSetRulesWhileDeciding(t *testing.T) {
	set := func(rev, limit int64) *rules.Index {
		return limitertest.Compile(t, &rules.Set{Revision: rev, Rules: []rules.Rule{rule("r", limit, time.Hour, nil)}})
	}
	l, _ := newLimiter(t, &rules.Set{Revision: 1, Rules: []rules.Rule{rule("r", 1000, time.Hour, nil)}})
	ixs := []*rules.Index{set(2, 2000), set(3, 3000)}
	inForce := []*rules.Compiled{l.Rules().Rules()[0], ixs[0].Rules()[0], ixs[1].Rules()[0]}
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for w := range 4 {
		wg.Go(func() {
			req := limiter.Request{User: fmt.Sprintf("u%d", w)}
			for range 300 {
				d, err := l.Check(context.Background(), &req)
				if err != nil || !slices.Contains(inForce, d.Rule) || d.Limit != d.Rule.Limit {
					errs <- fmt.Sprintf("Check = %+v, %v; want a decision under one rule set", d, err)
					return
				}
			}
		})
	}
	for i := range 200 {
		l.SetRules(ixs[i%2])
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	last := set(4, 7)
	l.SetRules(last)
	if d := check(t, l, limiter.Request{User: "u0"}); d.Limit != 7 || d.Rule != last.Rules()[0] {
		t.Errorf("after the last SetRules: limit %d, want 7 (revision 4)", d.Limit)
	}
}

func TestNoAllocs(t *testing.T) {
	l, _ := newLimiter(t, bigSet(100))
	req := limiter.Request{User: "alice", IP: "2001:db8::1", Method: "GET", Path: "/api/v1/orders/42"}
	check(t, l, req)
	if n := testing.AllocsPerRun(1000, func() { l.Check(context.Background(), &req) }); n != 0 {
		t.Errorf("Check allocs = %v, want 0", n)
	}
	// Nor for an identity kept as its digest and a path to clean.
	odd := limiter.Request{User: strings.Repeat("u", 300), IP: "[2001:db8::1]", Method: "get", Path: "/api//v1/./orders/42/?q=1"}
	check(t, l, odd)
	if n := testing.AllocsPerRun(1000, func() { l.Check(context.Background(), &odd) }); n != 0 {
		t.Errorf("Check of an odd call allocs = %v, want 0", n)
	}
}

// bigSet returns n rules: a few that match the benchmark's call, the rest
// on other endpoints and plans, as in a large deployment.
func bigSet(n int) *rules.Set {
	s := &rules.Set{DefaultPlan: "free"}
	s.Rules = append(s.Rules,
		rule("free-per-user", 1_000_000_000, time.Hour, func(r *rules.Rule) { r.Match.Plan = "free" }),
		rule("orders", 1_000_000_000, time.Minute, func(r *rules.Rule) { r.Match.Endpoint = "GET /api/v1/orders/*" }),
	)
	for i := len(s.Rules); i < n; i++ {
		i := i
		s.Rules = append(s.Rules, rule(fmt.Sprintf("r%d", i), 100, time.Minute, func(r *rules.Rule) {
			switch i % 3 {
			case 0:
				r.Match.Endpoint = fmt.Sprintf("GET /api/v1/resource%d", i)
			case 1:
				r.Match.Plan = fmt.Sprintf("plan%d", i)
			default:
				r.Match.Endpoint = fmt.Sprintf("* /api/v2/area%d/*", i)
			}
		}))
	}
	return s
}

// benchLimiter is a limiter over the embedded store (the real clock, no
// sweeps) with bigSet(n) in force, for the Check benchmarks.
func benchLimiter(b *testing.B, n int) *limiter.Limiter {
	b.Helper()
	l, _ := limitertest.New(b, bigSet(n), memory.Config{SweepInterval: -1})
	return l
}

// benchUsers returns the 1,024 user names from u<off>, for the Check
// benchmarks to spread their calls over.
func benchUsers(off int64) []string {
	users := make([]string, 1024)
	for i := range users {
		users[i] = fmt.Sprintf("u%06d", off+int64(i))
	}
	return users
}

// BenchmarkCheck is a full decision through the engine: identity, plan
// lookup, rule matching against n rules, and the embedded store. With
// matching=1 the call matches the plan's token bucket only; with matching=2
// also an endpoint rule (two buckets taken atomically).
func BenchmarkCheck(b *testing.B) {
	for _, c := range []struct {
		rules    int
		matching int
	}{{10, 1}, {10000, 1}, {10, 2}, {10000, 2}} {
		path := "/api/v1/profile"
		if c.matching == 2 {
			path = "/api/v1/orders/42"
		}
		n := c.rules
		b.Run(fmt.Sprintf("rules=%d/matching=%d", c.rules, c.matching), func(b *testing.B) {
			l, users := benchLimiter(b, n), benchUsers(0)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				req := limiter.Request{User: users[i&1023], Method: "GET", Path: path}
				d, err := l.Check(ctx, &req)
				if err != nil || d.Matched != c.matching {
					b.Fatalf("Check = %+v, %v; want %d rules matched", d, err, c.matching)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

func BenchmarkCheckParallel(b *testing.B) {
	l := benchLimiter(b, 10000)
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		users := benchUsers(n.Add(1) * 1024)
		i := 0
		for pb.Next() {
			req := limiter.Request{User: users[i&1023], Method: "GET", Path: "/api/v1/orders/42"}
			l.Check(context.Background(), &req)
			i++
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// TestOneBucketPerCaller: the public limiter keys a caller as package
// identity names it, whatever spelling of the same identity it is given:
// "[2001:db8::1]" and "2001:db8::1" (and an address with a port) are one
// IPv6 /64, and AppendClientID names the bucket Check used.
func TestOneBucketPerCaller(t *testing.T) {
	l, _ := newLimiter(t, &rules.Set{Rules: []rules.Rule{rule("ip", 1, time.Hour, func(r *rules.Rule) { r.By = rules.ByIP })}})
	if d := check(t, l, limiter.Request{IP: "2001:db8::1"}); !d.Allowed {
		t.Fatalf("2001:db8::1 = %+v, want allowed", d)
	}
	for _, ip := range []string{"[2001:db8::1]", "[2001:db8::1]:443", "2001:db8::2"} {
		req := limiter.Request{IP: ip}
		d := check(t, l, req)
		if d.Allowed {
			t.Errorf("%s = allowed, want denied: the same /64 as 2001:db8::1", ip)
		}
		if got := string(l.AppendClientID(nil, d.KeyedBy, &req)); got != "ip:2001:db8::/64" {
			t.Errorf("AppendClientID(%s) = %q, want ip:2001:db8::/64", ip, got)
		}
		if got := (identity.Identity{IP: ip}).ClientID("ip", 0); got != "ip:2001:db8::/64" {
			t.Errorf("identity.ClientID(%s) = %q, want the limiter's ip:2001:db8::/64", ip, got)
		}
	}
}

// TestOddIdentitiesDecide: a user too long or odd is its own bucket, keyed
// by its digest, and no other value shares it.
func TestOddIdentitiesDecide(t *testing.T) {
	l, _ := newLimiter(t, &rules.Set{Rules: []rules.Rule{rule("u", 1, time.Hour, func(r *rules.Rule) { r.By = rules.ByUser })}})
	long := strings.Repeat("u", 300)
	for _, user := range []string{long, "al\x7fice", "al\xffice"} {
		req := limiter.Request{User: user}
		if d := check(t, l, req); !d.Allowed || !strings.HasPrefix(string(l.AppendClientID(nil, d.KeyedBy, &req)), "user:h:") {
			t.Fatalf("first call of %q = %+v, want allowed under a user:h: id", user, d)
		}
		if d := check(t, l, req); d.Allowed {
			t.Errorf("second call of %q = allowed, want denied", user)
		}
	}
	// The digest id itself, given as a user, is another bucket.
	req := limiter.Request{User: long}
	id := string(l.AppendClientID(nil, rules.ByUser, &req))
	if d := check(t, l, limiter.Request{User: strings.TrimPrefix(id, "user:")}); !d.Allowed {
		t.Errorf("user %q = denied, want a bucket of its own", strings.TrimPrefix(id, "user:"))
	}
}

// TestPathsAndMethods: Check cleans the path and folds methods for every
// caller of the public API.
func TestPathsAndMethods(t *testing.T) {
	l, _ := newLimiter(t, &rules.Set{Rules: []rules.Rule{rule("orders", 1, time.Hour, func(r *rules.Rule) {
		r.By = rules.ByIP
		r.Match.Endpoint = "GET /api/orders"
	})}})
	if d := check(t, l, limiter.Request{IP: "203.0.113.7", Method: "GET", Path: "/api/orders"}); !d.Allowed {
		t.Fatalf("GET /api/orders = %+v, want allowed", d)
	}
	for _, c := range [][2]string{{"HEAD", "/api/orders"}, {"get", "/api//orders/"}, {"GET", "/api/%6frders?x"}, {"GET", "/api/orders;s=1"}} {
		if d := check(t, l, limiter.Request{IP: "203.0.113.7", Method: c[0], Path: c[1]}); d.Allowed || d.RuleID() != "orders" {
			t.Errorf("%s %s = %+v, want denied under orders", c[0], c[1], d)
		}
	}
}

// TestPeek: a request with Peek reads every bucket it matches and takes
// nothing, alone (Check) or beside requests that take (CheckMany).
func TestPeek(t *testing.T) {
	l, _ := newLimiter(t, &rules.Set{Rules: []rules.Rule{
		rule("per-user", 3, time.Minute, func(r *rules.Rule) { r.By = rules.ByUser; r.Algorithm = algorithm.FixedWindow }),
	}})
	peek := limiter.Request{User: "alice", Peek: true, Cost: 5}
	for i := range 2 {
		if d := check(t, l, peek); !d.Allowed || d.Remaining != 3 || d.ResetAfter != 0 {
			t.Fatalf("peek %d on a new bucket = %+v, want allowed, 3 remaining, reset 0", i+1, d)
		}
	}
	ds := make([]limiter.Decision, 2)
	if err := l.CheckMany(context.Background(), []limiter.Request{{User: "alice", Cost: 3}, peek}, ds); err != nil {
		t.Fatal(err)
	}
	if !ds[0].Allowed || ds[0].Remaining != 0 || !ds[1].Allowed || ds[1].Remaining != 0 {
		t.Fatalf("take 3 beside a peek = %+v, %+v; want both allowed with 0 remaining", ds[0], ds[1])
	}
	if d := check(t, l, peek); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("peek when exhausted = %+v, want allowed (nothing taken), 0 remaining", d)
	}
	if d := check(t, l, limiter.Request{User: "alice"}); d.Allowed {
		t.Fatalf("a call when exhausted = %+v, want denied", d)
	}
}
