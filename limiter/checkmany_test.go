package limiter_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/memory"
)

func checkMany(t *testing.T, l *limiter.Limiter, reqs ...limiter.Request) []limiter.Decision {
	t.Helper()
	ds := make([]limiter.Decision, len(reqs))
	if err := l.CheckMany(context.Background(), reqs, ds); err != nil {
		t.Fatalf("CheckMany: %v", err)
	}
	return ds
}

// TestCheckMany: each request is decided by its own rules, from one take
// of all of them in which a bucket two requests name is charged for both;
// a denial of one request consumes nothing from the others.
func TestCheckMany(t *testing.T) {
	l, _ := newLimiter(t, &rules.Set{Rules: []rules.Rule{
		rule("per-user", 5, time.Minute, func(r *rules.Rule) { r.By = rules.ByUser }),
		rule("per-ip", 3, time.Minute, func(r *rules.Rule) { r.By = rules.ByIP; r.Match.Endpoint = "GET /ip" }),
	}})
	ds := checkMany(t, l,
		limiter.Request{User: "alice"},
		limiter.Request{User: "bob", IP: "198.51.100.1", Method: "GET", Path: "/ip"},
		limiter.Request{User: "alice"})
	if d := ds[0]; !d.Allowed || d.RuleID() != "per-user" || d.Remaining != 3 || d.KeyedBy != rules.ByUser || d.Matched != 1 {
		t.Errorf("alice = %+v, want allowed by per-user, 3 left (her two calls taken together)", d)
	}
	if ds[2].Remaining != 3 || ds[2].RuleID() != "per-user" {
		t.Errorf("alice again = %+v, want the same bucket, 3 left", ds[2])
	}
	if d := ds[1]; !d.Allowed || d.RuleID() != "per-ip" || d.Remaining != 2 || d.KeyedBy != rules.ByIP || d.Matched != 2 {
		t.Errorf("bob = %+v, want per-ip (2 left) as the most restrictive of his 2 rules", d)
	}
	if d := check(t, l, limiter.Request{User: "alice"}); d.Remaining != 2 {
		t.Fatalf("alice alone = %d left, want 2: the batch took 2", d.Remaining)
	}

	// carol asks for more than per-user holds: the batch is denied, and
	// alice's bucket keeps what it had.
	ds = checkMany(t, l, limiter.Request{User: "alice"}, limiter.Request{User: "carol", Cost: 6}, limiter.Request{})
	if d := ds[1]; d.Allowed || d.RuleID() != "per-user" {
		t.Errorf("carol = %+v, want denied by per-user", d)
	}
	if d := ds[2]; !d.Allowed || d.Rule != nil || d.Now.IsZero() {
		t.Errorf("no identity = %+v, want allowed by no rule, with a time", d)
	}
	if d := check(t, l, limiter.Request{User: "alice"}); d.Remaining != 1 {
		t.Fatalf("alice after the denied batch = %d left, want 1: the batch took nothing", d.Remaining)
	}
}

// TestCheckManySteps: more buckets than one take holds are taken in steps
// of limiter.MaxRulesPerCall, each call still decided by its own.
func TestCheckManySteps(t *testing.T) {
	l, _ := newLimiter(t, &rules.Set{Rules: []rules.Rule{rule("per-user", 5, time.Minute, nil)}})
	reqs := make([]limiter.Request, limiter.MaxRulesPerCall+8)
	for i := range reqs {
		reqs[i] = limiter.Request{User: "u" + strconv.Itoa(i), Cost: int64(1 + i%3)}
	}
	for i, d := range checkMany(t, l, reqs...) {
		if want := int64(5 - 1 - i%3); !d.Allowed || d.Remaining != want {
			t.Errorf("request %d = allowed %v, %d left, want true, %d", i, d.Allowed, d.Remaining, want)
		}
	}
}

func TestCheckManyNoRules(t *testing.T) {
	l := limiter.New(limitertest.Store(t, memory.Config{SweepInterval: -1}), limiter.Config{})
	if err := l.CheckMany(context.Background(), []limiter.Request{{User: "a"}}, make([]limiter.Decision, 1)); !errors.Is(err, limiter.ErrNoRules) {
		t.Fatalf("CheckMany before SetRules = %v, want ErrNoRules", err)
	}
}
