package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/memory"
)

// No rule set Compile accepts makes a decision fail: random sets of 1 to
// 80 rules over a few plans, methods and paths, keyed by every identity,
// are either refused or decide every call. 33 catch-all rules, once
// accepted and then failing every call, are refused.
func TestNoAcceptedRuleSetFailsADecision(t *testing.T) {
	l := limiter.New(limitertest.Store(t, memory.Config{SweepInterval: -1}), limiter.Config{})

	all := &rules.Set{}
	for i := range 33 {
		all.Rules = append(all.Rules, rule(fmt.Sprintf("all-%d", i), 100, time.Minute, nil))
	}
	if _, err := rules.Compile(all); err == nil {
		t.Error("Compile of 33 catch-all rules = nil error, want it refused")
	}

	plans := []string{"", "free", "pro"}
	methods := []string{"GET", "POST", "*"}
	paths := []string{"/api/orders", "/api/*", "/*", "/login", "/api/orders/*"}
	bys := []rules.By{rules.ByClient, rules.ByUser, rules.ByAPIKey, rules.ByIP}
	r := rand.New(rand.NewPCG(7, 8))
	accepted, refused := 0, 0
	for round := range 300 {
		s := &rules.Set{DefaultPlan: "free"}
		for i := range 1 + r.IntN(80) {
			s.Rules = append(s.Rules, rule(fmt.Sprintf("r%d", i), 1_000_000, time.Minute, func(ru *rules.Rule) {
				ru.Match.Plan = plans[r.IntN(len(plans))]
				if r.IntN(4) > 0 {
					ru.Match.Endpoint = methods[r.IntN(len(methods))] + " " + paths[r.IntN(len(paths))]
				}
				ru.By = bys[r.IntN(len(bys))]
			}))
		}
		ix, err := rules.Compile(s)
		if err != nil {
			refused++
			continue
		}
		accepted++
		l.SetRules(ix)
		for range 50 {
			req := limiter.Request{User: "u", APIKey: "k", IP: "192.0.2.1", Plan: plans[r.IntN(len(plans))],
				Method: []string{"GET", "POST", "PUT"}[r.IntN(3)], Path: []string{"/api/orders", "/api/orders/7", "/login", "/x"}[r.IntN(4)]}
			if _, err := l.Check(context.Background(), &req); err != nil {
				if errors.Is(err, limiter.ErrTooManyRules) {
					t.Fatalf("round %d: an accepted set failed %+v: %v", round, req, err)
				}
				t.Fatal(err)
			}
		}
	}
	if accepted < 30 || refused < 30 {
		t.Errorf("%d sets accepted, %d refused: want both kinds tested", accepted, refused)
	}
}

// The most rules a set may have that all match one call: each is applied.
// One more and Compile refuses the set: the rules' bound is the limiter's.
func TestMaxRulesPerCallDecides(t *testing.T) {
	s := &rules.Set{}
	for i := range limiter.MaxRulesPerCall + 1 {
		s.Rules = append(s.Rules, rule(fmt.Sprintf("all-%d", i), 100, time.Minute, nil))
	}
	if _, err := rules.Compile(s); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("more than the %d one decision applies", limiter.MaxRulesPerCall)) {
		t.Fatalf("Compile of %d rules matching every call = %v, want refused", len(s.Rules), err)
	}
	s.Rules = s.Rules[:limiter.MaxRulesPerCall]
	l, _ := newLimiter(t, s)
	req := limiter.Request{User: "alice", Method: "GET", Path: "/"}
	if d := check(t, l, req); !d.Allowed || d.Matched != limiter.MaxRulesPerCall {
		t.Errorf("Check = allowed %v matched %d, want true %d", d.Allowed, d.Matched, limiter.MaxRulesPerCall)
	}
}
