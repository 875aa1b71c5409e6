package limiter_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
)

func reserve(t *testing.T, l *limiter.Limiter, req limiter.Request, maxWait time.Duration) (limiter.Decision, time.Duration) {
	t.Helper()
	d, wait, err := l.Reserve(context.Background(), &req, maxWait)
	if err != nil {
		t.Fatalf("Reserve(%+v, %v): %v", req, maxWait, err)
	}
	return d, wait
}

// Successive reservations get successive slots at the rule's rate; one
// whose slot is beyond its max wait takes nothing and is told when it
// would fit.
func TestReserveSuccessiveSlots(t *testing.T) {
	for _, kind := range []algorithm.Kind{algorithm.TokenBucket, algorithm.LeakyBucket} {
		t.Run(kind.String(), func(t *testing.T) {
			l, clock := newLimiter(t, &rules.Set{Rules: []rules.Rule{
				rule("partner", 10, time.Second, func(r *rules.Rule) { r.Algorithm = kind; r.Burst = 4; r.Match.Plan = "egress" }),
			}})
			req := limiter.Request{User: "api.partner.example", Plan: "egress"}
			burst := 4 // token bucket: capacity 4
			if kind == algorithm.LeakyBucket {
				burst = 5 // burst 4 on top of the conforming call
			}
			for i := 0; i < burst; i++ {
				if d, wait := reserve(t, l, req, 500*time.Millisecond); !d.Allowed || wait != 0 {
					t.Fatalf("reservation %d = allowed %v wait %v, want at once", i+1, d.Allowed, wait)
				}
			}
			for i := 1; i <= 5; i++ {
				d, wait := reserve(t, l, req, 500*time.Millisecond)
				if want := time.Duration(i) * 100 * time.Millisecond; !d.Allowed || wait != want {
					t.Fatalf("queued reservation %d = allowed %v wait %v, want %v", i, d.Allowed, wait, want)
				}
			}
			for range 2 { // nothing taken: the same answer twice
				d, wait := reserve(t, l, req, 500*time.Millisecond)
				if d.Allowed || wait != 0 || d.RetryAfter != 100*time.Millisecond || d.Reason != algorithm.ReasonLimited || d.RuleID() != "partner" {
					t.Fatalf("reservation beyond the max wait = %+v wait %v, want denied, retry after 100ms", d, wait)
				}
			}
			// A check (max wait 0) of the same budget sees no room either.
			if d, _ := reserve(t, l, req, 0); d.Allowed {
				t.Fatalf("reservation with no wait = %+v, want denied", d)
			}
			clock.Add(100_000)
			if d, wait := reserve(t, l, req, 500*time.Millisecond); !d.Allowed || wait != 500*time.Millisecond {
				t.Fatalf("100ms later = allowed %v wait %v, want the slot 500ms ahead", d.Allowed, wait)
			}
		})
	}
}

// Reservations made at once from many goroutines get distinct slots: the
// store takes each atomically.
func TestReserveConcurrentSlotsDistinct(t *testing.T) {
	l, _ := newLimiter(t, &rules.Set{Rules: []rules.Rule{
		rule("partner", 50, time.Second, func(r *rules.Rule) { r.Algorithm = algorithm.LeakyBucket; r.Burst = 0 }),
	}})
	const n = 64
	waits := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, wait, err := l.Reserve(context.Background(), &limiter.Request{User: "h"}, 10*time.Second)
			if err != nil || !d.Allowed {
				t.Errorf("Reserve = %+v, %v", d, err)
			}
			waits[i] = wait
		}()
	}
	wg.Wait()
	slices.Sort(waits)
	// burst 0 is the default 1: two calls at once, then one each 20ms.
	want := []time.Duration{0, 0}
	for i := 1; len(want) < n; i++ {
		want = append(want, time.Duration(i)*20*time.Millisecond)
	}
	if !slices.Equal(waits, want) {
		t.Fatalf("waits %v, want %v", waits, want)
	}
}

// With two rules, the call waits for the later of the two slots and both
// buckets are taken at that instant.
func TestReserveTwoRules(t *testing.T) {
	l, _ := newLimiter(t, &rules.Set{Rules: []rules.Rule{
		rule("fast", 10, time.Second, func(r *rules.Rule) { r.Burst = 1 }),
		rule("slow", 4, time.Second, func(r *rules.Rule) { r.Algorithm = algorithm.LeakyBucket; r.Burst = 0 }),
	}})
	req := limiter.Request{User: "h"}
	var got []time.Duration
	for range 5 {
		d, wait := reserve(t, l, req, 10*time.Second)
		if !d.Allowed {
			t.Fatalf("denied: %+v", d)
		}
		got = append(got, wait)
	}
	// slow: 2 at once, then every 250ms; fast (1 token, 100ms each)
	// makes the second wait 100ms, and is never the later after that.
	want := []time.Duration{0, 100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond}
	if !slices.Equal(got, want) {
		t.Fatalf("waits %v, want %v", got, want)
	}
}

func TestReserveRefusals(t *testing.T) {
	l, _ := newLimiter(t, &rules.Set{Rules: []rules.Rule{
		rule("tb", 10, time.Second, func(r *rules.Rule) { r.Match.Plan = "egress" }),
		rule("fw", 10, time.Second, func(r *rules.Rule) { r.Algorithm = algorithm.FixedWindow; r.Match.Plan = "ingress" }),
	}})
	_, _, err := l.Reserve(context.Background(), &limiter.Request{User: "h", Plan: "ingress"}, time.Second)
	if !errors.Is(err, limiter.ErrReserveKind) || !strings.Contains(err.Error(), `rule "fw" uses fixed_window`) {
		t.Errorf("a fixed_window rule: err %v, want ErrReserveKind naming the rule and its algorithm", err)
	}
	_, _, err = l.Reserve(context.Background(), &limiter.Request{User: "h", Plan: "other"}, time.Second)
	if !errors.Is(err, limiter.ErrNoBudget) {
		t.Errorf("no rule: err %v, want ErrNoBudget", err)
	}
	d, wait := reserve(t, l, limiter.Request{User: "h", Plan: "egress", Cost: 11}, time.Hour)
	if d.Allowed || wait != 0 || d.Reason != algorithm.ReasonCostExceedsCapacity || d.RetryAfter != 0 {
		t.Errorf("cost 11 over capacity 10 = %+v wait %v, want denied, cost_exceeds_capacity, no retry", d, wait)
	}
	// A max wait above MaxWait is MaxWait.
	for range 10 {
		reserve(t, l, limiter.Request{User: "h", Plan: "egress"}, 0)
	}
	d, wait = reserve(t, l, limiter.Request{User: "h", Plan: "egress", Cost: 10}, 100*time.Hour)
	if !d.Allowed || wait != time.Second {
		t.Errorf("cost 10 on an empty bucket = %+v wait %v, want a slot in 1s", d, wait)
	}
}

// TestReserveRuleCap: a rule's max_reserve_wait caps how far ahead its
// budget is reserved, whatever the caller asks: a burst of reservations
// asking for an hour each fills the queue only up to the cap, and the rest
// are refused with the time until one would fit (issue 27 §7: about 360
// calls in 0.1 s reserved the next hour of a shared budget).
func TestReserveRuleCap(t *testing.T) {
	for _, kind := range []algorithm.Kind{algorithm.TokenBucket, algorithm.LeakyBucket} {
		t.Run(kind.String(), func(t *testing.T) {
			l, _ := newLimiter(t, &rules.Set{Rules: []rules.Rule{
				rule("shared", 360, time.Hour, func(r *rules.Rule) { // one every 10 s
					r.Algorithm, r.Burst, r.By, r.Match.Plan = kind, 1, rules.ByGlobal, "egress"
					r.MaxReserveWait = rules.Duration(time.Minute)
				}),
			}})
			granted := 0
			var last time.Duration
			for i := range 360 {
				d, wait := reserve(t, l, limiter.Request{User: "worker-" + string(rune('a'+i%26)), Plan: "egress"}, time.Hour)
				if d.Allowed {
					granted++
					last = wait
				} else if d.RetryAfter <= 0 || d.RetryAfter > 10*time.Second {
					t.Fatalf("refused reservation %d: retry after %v, want within the next slot (10s)", i, d.RetryAfter)
				}
			}
			if last > time.Minute {
				t.Errorf("a reservation waits %v, more than the rule's cap of 1m", last)
			}
			if granted > 8 { // the burst, then one every 10 s for a minute
				t.Errorf("%d of 360 reservations asking for an hour granted, want the minute's worth (at most 8)", granted)
			}
		})
	}
}
