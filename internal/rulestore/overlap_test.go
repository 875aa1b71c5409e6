package rulestore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/pgtest"
	"github.com/sluicehq/sluice/rules"
)

// catchAllYAML is a rules file of n rules that all match every call.
func catchAllYAML(n int) string {
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - {id: all-%02d, limit: 100, window: 1m}\n", i)
	}
	return b.String()
}

// A rules file in which one call matches more rules than a decision can
// apply does not load: the last good rules stay in force, and the error
// names the rules, the limit and the fix.
func TestFileRefusesOverlappingRules(t *testing.T) {
	fx := newFixture(t)
	fx.write(t, catchAllYAML(32))
	f := fx.open(t)
	good := f.Current()
	if n := len(good.Rules()); n != 32 {
		t.Fatalf("%d rules loaded, want 32", n)
	}

	fx.write(t, catchAllYAML(33))
	err := f.Poll()
	if err == nil {
		t.Fatal("Poll of 33 catch-all rules = nil error, want the file refused")
	}
	for _, want := range []string{"line 1: rules: ", "matches 33 enabled rules, more than the 32", `"all-00"`, `"all-32"`, "narrower match"} {
		if !strings.Contains(err.Error(), want) || !strings.Contains(f.Status().Error, want) {
			t.Errorf("Poll error %q / Status().Error %q, want them to contain %q", err, f.Status().Error, want)
		}
	}
	if f.Current() != good {
		t.Errorf("the refused file replaced the rules in force")
	}

	// The API refuses the 33rd rule too, and the file keeps 32.
	fx.write(t, catchAllYAML(32))
	if err := f.Poll(); err != nil {
		t.Fatal(err)
	}
	_, err = f.Update(context.Background(), -1, addRule(rule("all-32", 1)))
	var fe *rules.FieldError
	if !errors.Is(err, ErrInvalid) || !errors.As(err, &fe) || fe.Field != "rules" || !strings.Contains(fe.Message, `"all-32"`) {
		t.Errorf("Update adding a 33rd catch-all rule: %v, want ErrInvalid naming the rules", err)
	}
	if n := len(f.Current().Rules()); n != 32 {
		t.Errorf("%d rules in force, want 32", n)
	}

	// A file that holds too many from the start does not open.
	fx2 := newFixture(t)
	fx2.write(t, catchAllYAML(40))
	if _, err := OpenFile(fx2.cfg); err == nil || !strings.Contains(err.Error(), "more than the 32") {
		t.Errorf("OpenFile of 40 catch-all rules: %v, want it refused", err)
	}
}

// PostgreSQL: an update that would make one call match more than 32 rules
// is refused, and rows that do (a hand edit) do not load: the last good
// rules stay in force and Status names the rules.
func TestPostgresRefusesOverlappingRules(t *testing.T) {
	url := pgtest.NewDatabase(t)
	fx := newPGFixture(t, url)
	p := fx.open(t)
	if _, err := p.Update(context.Background(), -1, func(s *rules.Set) error {
		for i := range 32 {
			s.Rules = append(s.Rules, rule(fmt.Sprintf("all-%02d", i), 100))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	_, err := p.Update(context.Background(), -1, addRule(rule("all-32", 1)))
	var fe *rules.FieldError
	if !errors.Is(err, ErrInvalid) || !errors.As(err, &fe) || fe.Field != "rules" || !strings.Contains(fe.Message, `"all-32"`) {
		t.Errorf("Update adding a 33rd catch-all rule: %v, want ErrInvalid naming the rules", err)
	}
	run(t, p)
	if err := pgtest.Exec(url, `INSERT INTO sluice_rules (id, position, body) VALUES ('all-32', 32, '{"id": "all-32", "limit": 100, "window": "1m"}'); UPDATE sluice_state SET revision = 2`); err != nil {
		t.Fatal(err)
	}
	fx.tick <- time.Now()
	fx.tick <- time.Now()
	st := p.Status()
	if !strings.Contains(st.Error, "matches 33 enabled rules, more than the 32") || !strings.Contains(st.Error, `"all-32"`) || st.Revision != 1 {
		t.Errorf("Status() = %+v, want the overlapping rules named and revision 1 kept", st)
	}
	if n := len(p.Current().Rules()); n != 32 {
		t.Errorf("%d rules in force, want the last good 32", n)
	}
}
