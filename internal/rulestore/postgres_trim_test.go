package rulestore

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/pgtest"
	"github.com/sluicehq/sluice/rules"
)

// TestPostgresSetAtAfterTrim: after docs/fleet.md's trim of the history
// (DELETE ... WHERE revision < N in both tables), SetAt rebuilds every
// revision from N on — including rules and clients that last changed
// before N — and answers ErrGone, naming the oldest revision kept, for
// the revisions before N.
func TestPostgresSetAtAfterTrim(t *testing.T) {
	url := pgtest.NewDatabase(t)
	p := newPGFixture(t, url).open(t)
	ctx := context.Background()
	sets := map[int64]string{}
	step := recordSets(t, ctx, p, sets)
	step(addRule(rule("a", 10)))    // 1
	step(addRule(rule("b", 20)))    // 2: b never changes again
	step(func(s *rules.Set) error { // 3: a client that never changes again
		s.Clients = map[string]rules.Client{"user:bob": {Plan: "pro"}, "user:eve": {Plan: "free"}}
		s.DefaultPlan = "free"
		return nil
	})
	step(func(s *rules.Set) error { s.Rules[0].Limit = 11; return nil }) // 4: the cutoff
	step(addRule(rule("c", 30)))                                         // 5
	step(func(s *rules.Set) error {                                      // 6: delete a, move c first, drop eve
		s.Rules = []rules.Rule{s.Rules[2], s.Rules[1]}
		delete(s.Clients, "user:eve")
		return nil
	})
	step(func(s *rules.Set) error { s.Rules[1].Limit = 21; return nil }) // 7: b changes at last

	const cutoff = 4
	if err := pgtest.Exec(url, `BEGIN;
		DELETE FROM sluice_history   WHERE revision < 4;
		DELETE FROM sluice_revisions WHERE revision < 4;
		COMMIT`); err != nil {
		t.Fatal(err)
	}
	for rev := int64(cutoff); rev <= 7; rev++ {
		got, err := p.SetAt(ctx, rev)
		if err != nil {
			t.Errorf("SetAt(%d) after the trim: %v", rev, err)
			continue
		}
		if got.Revision != rev || yamlOf(t, got) != sets[rev] {
			t.Errorf("SetAt(%d) after the trim =\n%s\nwant\n%s", rev, yamlOf(t, got), sets[rev])
		}
	}
	for _, rev := range []int64{0, 1, cutoff - 1} {
		_, err := p.SetAt(ctx, rev)
		if !errors.Is(err, ErrGone) || !strings.Contains(err.Error(), "the oldest revision kept is 4") {
			t.Errorf("SetAt(%d) after the trim = %v, want ErrGone naming revision 4", rev, err)
		}
	}
	if _, err := p.SetAt(ctx, 8); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetAt(8) = %v, want ErrNotFound", err)
	}

	// A trim of the history alone (sluice_revisions kept) does not make
	// SetAt guess: what the history no longer covers is gone too.
	if err := pgtest.Exec(url, `DELETE FROM sluice_history WHERE revision < 6`); err != nil {
		t.Fatal(err)
	}
	if got, err := p.SetAt(ctx, 5); err != nil || yamlOf(t, got) != sets[5] {
		t.Errorf("SetAt(5) after the history before 6 went = %v, %v; want revision 5's set (the changes after it are kept)", got, err)
	}
	if _, err := p.SetAt(ctx, 4); !errors.Is(err, ErrGone) || !strings.Contains(err.Error(), "the oldest revision kept is 5") {
		t.Errorf("SetAt(4) after the history before 6 went = %v, want ErrGone naming revision 5", err)
	}
}
