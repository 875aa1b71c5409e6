package rulestore

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/rules"
)

// TestEmptyRulesFileRefused: an edit that empties the rules file (or
// leaves it without a rules: list) would lift every limit; it is refused
// like any broken edit — the last good rules stay, a WARN says why and
// Status (which sluice_rules_load_errors_total counts) shows it — while
// "rules: []" written out loads as zero rules (issue 27 §6). At start, such
// a file is an error, as a broken one is.
func TestEmptyRulesFileRefused(t *testing.T) {
	fx := newFixture(t)
	f := fx.open(t)
	good, err := f.Update(context.Background(), -1, addRule(rule("a", 1)))
	if err != nil {
		t.Fatal(err)
	}
	for i, doc := range []string{"", "# all commented out\n", "revision: 9\ndefault_plan: free\n", "rules:\n"} {
		fx.write(t, doc)
		if err := f.Poll(); !errors.Is(err, rules.ErrNoRules) {
			t.Errorf("Poll of %q = %v, want ErrNoRules", doc, err)
		}
		if f.Current() != good {
			t.Errorf("%q replaced the rules in force: %v", doc, ruleIDs(f.Current()))
		}
		if st := f.Status(); !strings.Contains(st.Error, `"rules: []"`) {
			t.Errorf("Status().Error = %q, want the fix named", st.Error)
		}
		if n := fx.logs.count("level=WARN"); n != i+1 {
			t.Errorf("after %d refused edits, %d WARN lines:\n%s", i+1, n, fx.logs)
		}
	}
	fx.write(t, "rules: []\n")
	if err := f.Poll(); err != nil {
		t.Fatalf("Poll of rules: []: %v", err)
	}
	if ids := ruleIDs(f.Current()); len(ids) != 0 {
		t.Errorf("rules after rules: [] = %v, want none", ids)
	}

	fx2 := newFixture(t)
	fx2.write(t, "")
	if _, err := OpenFile(fx2.cfg); !errors.Is(err, rules.ErrNoRules) {
		t.Errorf("OpenFile of an empty file = %v, want ErrNoRules", err)
	}
}
