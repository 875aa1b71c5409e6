package rulestore

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/pgtest"
	"github.com/sluicehq/sluice/rules"
)

// TestFileDryRun: an Update under WithDryRun returns the rules the change
// would put in force and stores nothing — the file, its mtime, the rules in
// force and the subscribers untouched, no temporary file left — and meets
// the failures the write would (a read-only rules file).
func TestFileDryRun(t *testing.T) {
	fx := newFixture(t)
	f := fx.open(t)
	ctx := context.Background()
	base, err := f.Update(ctx, -1, addRule(rule("a", 10)))
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	f.Subscribe(func(*rules.Index) { calls++ })
	content := fx.read(t)
	fi0, _ := os.Stat(fx.path)

	ix, err := f.Update(WithDryRun(ctx), base.Revision(), addRule(rule("b", 1)))
	if err != nil || ix.Revision() != base.Revision()+1 || len(ix.Rules()) != 2 {
		t.Fatalf("dry run = %v, %v; want revision %d with 2 rules", ix, err, base.Revision()+1)
	}
	fi, _ := os.Stat(fx.path)
	if f.Current() != base || calls != 0 || fx.read(t) != content || !fi.ModTime().Equal(fi0.ModTime()) {
		t.Errorf("the dry run stored something: in force %d, %d subscriber calls, file changed %v",
			f.Current().Revision(), calls, fx.read(t) != content)
	}
	noTempFiles(t, fx.path)

	if _, err := f.Update(WithDryRun(ctx), -1, addRule(rule("a", 1))); !errors.Is(err, ErrInvalid) {
		t.Errorf("dry run of a duplicate rule = %v, want ErrInvalid", err)
	}
	if err := os.Chmod(fx.path, 0o444); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Update(WithDryRun(ctx), -1, addRule(rule("b", 1))); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("dry run on a read-only rules file = %v, want ErrUnavailable saying read-only", err)
	}
	noTempFiles(t, fx.path)
}

// TestPostgresDryRun: an Update under WithDryRun runs the change's
// statements in a transaction it rolls back: nothing is stored, and what
// the database would refuse (here a trigger) is refused.
func TestPostgresDryRun(t *testing.T) {
	url := pgtest.NewDatabase(t)
	p := newPGFixture(t, url).open(t)
	ctx := context.Background()
	base, err := p.Update(ctx, -1, addRule(rule("a", 10)))
	if err != nil {
		t.Fatal(err)
	}
	rows := func() int64 {
		return query[int64](t, url, `SELECT (SELECT count(*) FROM sluice_revisions) + (SELECT count(*) FROM sluice_history) + (SELECT count(*) FROM sluice_rules) + (SELECT revision FROM sluice_state)`)
	}
	before := rows()
	ix, err := p.Update(WithDryRun(ctx), base.Revision(), addRule(rule("b", 1)))
	if err != nil || ix.Revision() != base.Revision()+1 || len(ix.Rules()) != 2 {
		t.Fatalf("dry run = %v, %v; want revision %d with 2 rules", ix, err, base.Revision()+1)
	}
	if got := rows(); got != before || p.Current() != base {
		t.Errorf("the dry run stored something: rows %d, want %d; in force revision %d", got, before, p.Current().Revision())
	}
	if err := pgtest.Exec(url, `CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'boom refused'; END $$;
		CREATE TRIGGER boom BEFORE INSERT ON sluice_rules FOR EACH ROW EXECUTE FUNCTION boom()`); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Update(WithDryRun(ctx), -1, addRule(rule("b", 1))); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "boom refused") {
		t.Errorf("dry run the database refuses = %v, want its refusal", err)
	}
}
