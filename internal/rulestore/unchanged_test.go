package rulestore

import (
	"context"
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/pgtest"
	"github.com/sluicehq/sluice/rules"
)

// unchangedBase is the Update that makes the set unchangedEdits edit: rule
// "a" and default plan "free".
func unchangedBase(s *rules.Set) error {
	s.DefaultPlan = "free"
	s.Rules = append(s.Rules, rule("a", 10))
	return nil
}

// unchangedEdits are Updates that change nothing on the set unchangedBase
// makes.
var unchangedEdits = map[string]func(*rules.Set) error{
	"nothing":             func(*rules.Set) error { return nil },
	"same rule again":     func(s *rules.Set) error { s.Rules[0] = rule("a", 10); return nil },
	"same default plan":   func(s *rules.Set) error { s.DefaultPlan = "free"; return nil },
	"empty clients map":   func(s *rules.Set) error { s.Clients = map[string]rules.Client{}; return nil },
	"revision set by fn":  func(s *rules.Set) error { s.Revision = 99; return nil },
	"rules slice rebuilt": func(s *rules.Set) error { s.Rules = append([]rules.Rule(nil), s.Rules...); return nil },
}

// TestUpdateUnchangedStoresNothing: a File Update that changes nothing
// returns the rules in force at their revision, does not rewrite the file
// and does not call subscribers; a real change still gets the next
// revision.
func TestUpdateUnchangedStoresNothing(t *testing.T) {
	fx := newFixture(t)
	f := fx.open(t)
	ctx := context.Background()
	base, err := f.Update(ctx, -1, unchangedBase)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	f.Subscribe(func(*rules.Index) { calls++ })
	fi0, _ := os.Stat(fx.path)
	content := fx.read(t)
	for name, fn := range unchangedEdits {
		t.Run(name, func(t *testing.T) {
			ix, err := f.Update(ctx, base.Revision(), fn)
			if err != nil || ix != base {
				t.Fatalf("Update = revision %d, %v; want the rules in force (revision %d), nil", ix.Revision(), err, base.Revision())
			}
			if fi, _ := os.Stat(fx.path); fx.read(t) != content || !fi.ModTime().Equal(fi0.ModTime()) {
				t.Errorf("the rules file was rewritten")
			}
			if calls != 0 {
				t.Errorf("subscribers called %d times, want 0", calls)
			}
		})
	}
	ix, err := f.Update(ctx, base.Revision(), addRule(rule("b", 1)))
	if err != nil || ix.Revision() != base.Revision()+1 || calls != 1 {
		t.Errorf("a real change = revision %d, %v, %d subscriber calls; want revision %d, 1 call", ix.Revision(), err, calls, base.Revision()+1)
	}
}

// TestPostgresUpdateUnchangedStoresNothing: a Postgres Update that changes
// nothing writes no revision, history row or notification; an instance
// that had not yet loaded the head gets it.
func TestPostgresUpdateUnchangedStoresNothing(t *testing.T) {
	url := pgtest.NewDatabase(t)
	p := newPGFixture(t, url).open(t)
	other := newPGFixture(t, url).open(t) // no Run: it lags behind
	ctx := context.Background()
	base, err := p.Update(ctx, -1, unchangedBase)
	if err != nil {
		t.Fatal(err)
	}
	rows := func() int64 {
		return query[int64](t, url, `SELECT (SELECT count(*) FROM sluice_revisions) + (SELECT count(*) FROM sluice_history)`)
	}
	before := rows()
	for name, fn := range unchangedEdits {
		t.Run(name, func(t *testing.T) {
			ix, err := p.Update(ctx, base.Revision(), fn)
			if err != nil || ix != base {
				t.Fatalf("Update = revision %d, %v; want the rules in force (revision %d), nil", ix.Revision(), err, base.Revision())
			}
			if got := rows(); got != before {
				t.Errorf("revision and history rows = %d, want %d", got, before)
			}
		})
	}
	if got := query[int64](t, url, `SELECT revision FROM sluice_state`); got != base.Revision() {
		t.Errorf("head = %d, want %d", got, base.Revision())
	}
	ix, err := other.Update(ctx, base.Revision(), unchangedEdits["same rule again"])
	if err != nil || ix.Revision() != base.Revision() || other.Current().Revision() != base.Revision() || rows() != before {
		t.Errorf("unchanged Update on a lagging instance = revision %d, %v, in force %d; want %d, nothing stored",
			ix.Revision(), err, other.Current().Revision(), base.Revision())
	}
}
