package rulestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/pgtest"
	"github.com/sluicehq/sluice/rules"
)

// replaceRules is how many rules the replaced-database tests hold: enough
// that a lost one would not hide in a handful.
const replaceRules = 120

// fillRules writes replaceRules rules (one revision each), two clients and a
// default plan through p, and returns the set in force.
func fillRules(t *testing.T, p *Postgres) *rules.Set {
	t.Helper()
	ctx := context.Background()
	for i := range replaceRules {
		r := rule(fmt.Sprintf("r%03d", i), int64(i+1))
		r.Match.Endpoint = fmt.Sprintf("GET /r%03d", i) // one rule per call: a call matches at most 32
		if _, err := p.Update(ctx, -1, addRule(r)); err != nil {
			t.Fatal(err)
		}
	}
	ix, err := p.Update(ctx, -1, func(s *rules.Set) error {
		s.Clients = map[string]rules.Client{"user:bob": {Plan: "pro"}, "api_key:k1": {Plan: "free"}}
		s.DefaultPlan = "free"
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ix.Set()
}

// waitFor polls cond every 10 ms until it holds, ticking the fixtures'
// refresh, or fails after 10 s.
func waitFor(t *testing.T, what string, cond func() bool, fxs ...*pgFixture) {
	t.Helper()
	for start := time.Now(); !cond(); {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("after 10s: %s", what)
		}
		for _, fx := range fxs {
			select {
			case fx.tick <- time.Now():
			default: // the store is busy refreshing
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sameRules reports whether p serves want's rules, clients and default
// plan at revision rev.
func sameRules(t *testing.T, p *Postgres, want *rules.Set, rev int64) bool {
	t.Helper()
	w := want.Clone()
	w.Revision = rev
	return yamlOf(t, p.Current().Set()) == yamlOf(t, w)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPostgresReplacedDatabase is the sequence of a database replaced under
// a fleet: two instances serve the same rules; the database is dropped
// (writes: 503 saying it does not exist) and created again empty; one
// instance restarts and migrates it (revision 0). Neither instance takes
// the empty database's rules: both keep serving theirs, say why in Status
// (Refused), refuse writes and history reads with the way out, and leave
// their snapshots alone. RestoreSnapshot from one snapshot then writes the
// rules at the next revision with a new identity, and both instances take
// it; nothing is lost and writes work again.
func TestPostgresReplacedDatabase(t *testing.T) {
	url := pgtest.NewDatabase(t)
	dir := t.TempDir()
	fa, fb := newPGFixture(t, url), newPGFixture(t, url)
	fa.cfg.SnapshotPath, fb.cfg.SnapshotPath = filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	a, b := fa.open(t), fb.open(t)
	run(t, b)
	want := fillRules(t, a)
	rev := want.Revision
	waitFor(t, "b takes the rules", func() bool { return b.Current().Revision() == rev }, fb)
	waitFor(t, "b's snapshot is written", func() bool {
		ix, _, err := readSnapshot(fb.cfg.SnapshotPath)
		return err == nil && ix.Revision() == rev
	})
	snapA, snapB := readFile(t, fa.cfg.SnapshotPath), readFile(t, fb.cfg.SnapshotPath)
	first := b.Status().Database
	if first == "" || a.Status().Database != first || !strings.Contains(snapB, snapshotIDPrefix+first) {
		t.Fatalf("database identity: a %q, b %q, b's snapshot:\n%.300s\nwant one identity, in the snapshot too", a.Status().Database, first, snapB)
	}
	ctx := context.Background()

	if err := pgtest.DropDatabase(url); err != nil {
		t.Fatal(err)
	}
	_, err := b.Update(ctx, -1, addRule(rule("while-missing", 1)))
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("Update while the database is missing = %v, want ErrUnavailable saying it does not exist", err)
	}
	if err := pgtest.CreateDatabase(url); err != nil {
		t.Fatal(err)
	}
	_, err = b.Update(ctx, -1, addRule(rule("while-empty", 1)))
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "lacks sluice's tables") || !strings.Contains(err.Error(), "sluice rules restore") {
		t.Errorf("Update on the empty database = %v, want ErrUnavailable saying it lacks sluice's tables and how to restore", err)
	}

	// One instance restarts: it migrates the new database (revision 0)
	// and serves its snapshot's rules rather than none.
	a.Close()
	a = fa.open(t)
	run(t, a)
	if got := query[int64](t, url, `SELECT revision FROM sluice_state`); got != 0 {
		t.Fatalf("the new database is at revision %d, want 0", got)
	}
	second := query[string](t, url, `SELECT id::text FROM sluice_database`)
	type inst struct {
		name string
		p    *Postgres
		fx   *pgFixture
	}
	insts := []inst{{"restarted", a, fa}, {"running", b, fb}}
	for _, in := range insts {
		waitFor(t, in.name+" refuses the new database", func() bool {
			st := in.p.Status()
			return st.Refused && strings.Contains(st.Error, "is another database (id "+second+", revision 0)")
		}, fa, fb)
		st := in.p.Status()
		if !sameRules(t, in.p, want, rev) || st.Revision != rev || st.Database != first ||
			!strings.Contains(st.Error, "sluice rules restore --from-snapshot "+in.fx.cfg.SnapshotPath) {
			t.Errorf("%s instance: revision %d, database %q, Status %+v; want its %d rules at revision %d of %s, and the restore command with its snapshot",
				in.name, in.p.Current().Revision(), st.Database, st, replaceRules, rev, first)
		}
		_, err := in.p.Update(ctx, -1, addRule(rule("x", 1)))
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "is another database") {
			t.Errorf("%s instance: Update = %v, want ErrUnavailable saying why", in.name, err)
		}
		if _, err := in.p.SetAt(ctx, 0); !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s instance: SetAt = %v, want ErrUnavailable", in.name, err)
		}
	}
	if got := fa.logs.count("refusing the rules database"); got != 1 {
		t.Errorf("the restarted instance logged the refusal %d times, want once:\n%s", got, fa.logs)
	}
	if readFile(t, fa.cfg.SnapshotPath) != snapA || readFile(t, fb.cfg.SnapshotPath) != snapB {
		t.Error("a snapshot was rewritten while the database was refused")
	}

	res, err := RestoreSnapshot(ctx, RestoreConfig{URL: url, Snapshot: fb.cfg.SnapshotPath})
	if err != nil {
		t.Fatalf("RestoreSnapshot: %v", err)
	}
	if res.Revision != rev+1 || res.From != first || res.FromRevision != rev || res.Replaced != second || res.Rules != replaceRules || res.Clients != 2 ||
		res.Database == "" || res.Database == first || res.Database == second {
		t.Errorf("RestoreSnapshot = %+v, want revision %d from %s at %d into %s, %d rules, 2 clients, a new identity", res, rev+1, first, rev, second, replaceRules)
	}
	for _, in := range insts {
		waitFor(t, in.name+" takes the restored database", func() bool {
			st := in.p.Status()
			return !st.Refused && st.Error == "" && st.Revision == rev+1
		}, fa, fb)
		if !sameRules(t, in.p, want, rev+1) || in.p.Status().Database != res.Database {
			t.Errorf("%s instance after the restore: %d rules at %d, database %s; want all %d at %d of %s",
				in.name, len(in.p.Current().Rules()), in.p.Current().Revision(), in.p.Status().Database, replaceRules, rev+1, res.Database)
		}
	}
	for _, path := range []string{fa.cfg.SnapshotPath, fb.cfg.SnapshotPath} {
		ix, id, err := readSnapshot(path)
		if err != nil || ix.Revision() != rev+1 || id != res.Database {
			t.Errorf("snapshot %s after the restore: revision %v, database %q, %v; want %d of %s", path, ix.Revision(), id, err, rev+1, res.Database)
		}
	}
	if _, err := a.Update(ctx, rev+1, addRule(rule("after", 7))); err != nil {
		t.Fatalf("Update after the restore: %v", err)
	}
	waitFor(t, "b takes the write after the restore", func() bool { return b.Current().Revision() == rev+2 }, fb)
	if got := len(b.Current().Rules()); got != replaceRules+1 {
		t.Errorf("b serves %d rules after the restore and one more, want %d", got, replaceRules+1)
	}
	// The history starts at the restore: older revisions are gone, and
	// the restore's rows say who made it.
	if _, err := b.SetAt(ctx, rev); !errors.Is(err, ErrGone) {
		t.Errorf("SetAt(%d) on the restored database = %v, want ErrGone", rev, err)
	}
	if got, err := b.SetAt(ctx, rev+1); err != nil || len(got.Rules) != replaceRules {
		t.Errorf("SetAt(%d) on the restored database = %v, %v; want the %d restored rules", rev+1, got, err, replaceRules)
	}
	hs, err := b.History(ctx, HistoryQuery{Kind: KindRule, ID: "r000"})
	if err != nil || len(hs) != 1 || hs[0].Op != OpCreate || hs[0].Actor != "sluice rules restore" || hs[0].Revision != rev+1 {
		t.Errorf("history of r000 after the restore = %+v, %v; want its create by sluice rules restore at %d", hs, err, rev+1)
	}
}

// TestPostgresRevisionBackwards: the same database back at an older
// revision (restored from a backup) is refused like another one, and a
// restore from the snapshot brings the instance back to it without
// --force.
func TestPostgresRevisionBackwards(t *testing.T) {
	url := pgtest.NewDatabase(t)
	fx := newPGFixture(t, url)
	fx.cfg.SnapshotPath = filepath.Join(t.TempDir(), "snap.yaml")
	p := fx.open(t)
	run(t, p)
	ctx := context.Background()
	for i := range 5 {
		if _, err := p.Update(ctx, -1, addRule(rule(fmt.Sprintf("b%d", i), int64(i+1)))); err != nil {
			t.Fatal(err)
		}
	}
	snap := readFile(t, fx.cfg.SnapshotPath)
	// What a restore of an older backup of the same database looks like.
	if err := pgtest.Exec(url, `BEGIN;
		DELETE FROM sluice_rules WHERE id IN ('b3', 'b4');
		DELETE FROM sluice_history WHERE revision > 3;
		DELETE FROM sluice_revisions WHERE revision > 3;
		UPDATE sluice_state SET revision = 3;
		COMMIT`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the store refuses the older revision", func() bool { return p.Status().Refused }, fx)
	if st := p.Status(); !strings.Contains(st.Error, "went back from revision 5 to 3") || p.Current().Revision() != 5 || len(p.Current().Rules()) != 5 {
		t.Errorf("Status %+v, %d rules at %d; want the 5 rules of revision 5 kept and the way back named", st, len(p.Current().Rules()), p.Current().Revision())
	}
	if readFile(t, fx.cfg.SnapshotPath) != snap {
		t.Error("the snapshot was rewritten with the older revision")
	}
	res, err := RestoreSnapshot(ctx, RestoreConfig{URL: url, Snapshot: fx.cfg.SnapshotPath})
	if err != nil || res.Revision != 6 {
		t.Fatalf("RestoreSnapshot = %+v, %v; want revision 6", res, err)
	}
	waitFor(t, "the store takes the restore", func() bool { return !p.Status().Refused && p.Current().Revision() == 6 }, fx)
	if got := ruleIDs(p.Current()); fmt.Sprint(got) != "[b0 b1 b2 b3 b4]" {
		t.Errorf("rules after the restore = %v, want b0 to b4", got)
	}
	// Restoring again finds nothing to do.
	if _, err := RestoreSnapshot(ctx, RestoreConfig{URL: url, Snapshot: fx.cfg.SnapshotPath}); err == nil || !strings.Contains(err.Error(), "nothing to restore") {
		t.Errorf("a second RestoreSnapshot = %v, want nothing to restore", err)
	}
}

// TestPostgresRestoreRefusals: a restore from a snapshot older than what
// an instance serves is not taken by that instance, which says to restore
// again with --force from its own snapshot; a restore into a database with
// changes of its own, or of a snapshot that names no database, needs
// --force.
func TestPostgresRestoreRefusals(t *testing.T) {
	url := pgtest.NewDatabase(t)
	fx := newPGFixture(t, url)
	dir := t.TempDir()
	fx.cfg.SnapshotPath = filepath.Join(dir, "snap.yaml")
	p := fx.open(t)
	run(t, p)
	ctx := context.Background()
	old := filepath.Join(dir, "old.yaml")
	for i := range 6 {
		if _, err := p.Update(ctx, -1, addRule(rule(fmt.Sprintf("o%d", i), int64(i+1)))); err != nil {
			t.Fatal(err)
		}
		if i == 2 { // the snapshot at revision 3
			if err := os.WriteFile(old, []byte(readFile(t, fx.cfg.SnapshotPath)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := pgtest.Replace(url); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the store refuses the empty database", func() bool { return p.Status().Refused }, fx)

	res, err := RestoreSnapshot(ctx, RestoreConfig{URL: url, Snapshot: old})
	if err != nil || res.Revision != 4 {
		t.Fatalf("RestoreSnapshot(old) = %+v, %v; want revision 4", res, err)
	}
	waitFor(t, "the store refuses the restore of an older snapshot", func() bool {
		return strings.Contains(p.Status().Error, "the restore lacks revisions 4 to 6")
	}, fx)
	if st := p.Status(); !st.Refused || !strings.Contains(st.Error, "sluice rules restore --force --from-snapshot "+fx.cfg.SnapshotPath) || p.Current().Revision() != 6 {
		t.Errorf("Status %+v at revision %d; want revision 6 kept and a --force restore from its snapshot asked", st, p.Current().Revision())
	}
	if _, err := RestoreSnapshot(ctx, RestoreConfig{URL: url, Snapshot: fx.cfg.SnapshotPath}); err == nil || !strings.Contains(err.Error(), "holds changes of its own (revision 4, 3 rules)") {
		t.Errorf("RestoreSnapshot into a database with changes = %v, want a refusal naming them", err)
	}
	res, err = RestoreSnapshot(ctx, RestoreConfig{URL: url, Snapshot: fx.cfg.SnapshotPath, Force: true})
	if err != nil || res.Revision != 7 {
		t.Fatalf("RestoreSnapshot(--force) = %+v, %v; want revision 7", res, err)
	}
	waitFor(t, "the store takes the forced restore", func() bool { return !p.Status().Refused && p.Current().Revision() == 7 }, fx)
	if got := len(p.Current().Rules()); got != 6 {
		t.Errorf("%d rules after the forced restore, want 6", got)
	}

	noID := filepath.Join(dir, "noid.yaml")
	if err := os.WriteFile(noID, []byte("revision: 3\nrules: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := RestoreSnapshot(ctx, RestoreConfig{URL: url, Snapshot: noID}); err == nil || !strings.Contains(err.Error(), "names no database") {
		t.Errorf("RestoreSnapshot of a snapshot without a database = %v, want a refusal", err)
	}
	if _, err := RestoreSnapshot(ctx, RestoreConfig{URL: url, Snapshot: filepath.Join(dir, "none.yaml")}); err == nil || !strings.Contains(err.Error(), "none.yaml") {
		t.Errorf("RestoreSnapshot of a missing file = %v, want an error naming it", err)
	}
}

// TestPostgresUnreadableSnapshot: a snapshot that does not load stops the
// start even with the database up: overwriting it could lose the only copy
// of newer rules.
func TestPostgresUnreadableSnapshot(t *testing.T) {
	url := pgtest.NewDatabase(t)
	fx := newPGFixture(t, url)
	fx.cfg.SnapshotPath = filepath.Join(t.TempDir(), "snap.yaml")
	if err := os.WriteFile(fx.cfg.SnapshotPath, []byte("rules: [{id: x, limit: -1, window: 1m}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := OpenPostgres(context.Background(), fx.cfg)
	if err == nil || !strings.Contains(err.Error(), "snap.yaml") || !strings.Contains(err.Error(), "remove it") {
		t.Errorf("OpenPostgres with a broken snapshot = %v, want an error naming it and the way out", err)
	}
}

// TestPostgresSnapshotWithoutIdentity: a snapshot written before databases
// had an identity is checked by its revision: a database behind it is
// refused, one at it or ahead is taken, and the snapshot then names it.
func TestPostgresSnapshotWithoutIdentity(t *testing.T) {
	url := pgtest.NewDatabase(t)
	fx := newPGFixture(t, url)
	fx.cfg.SnapshotPath = filepath.Join(t.TempDir(), "snap.yaml")
	old := "# sluice rules snapshot\nrevision: 2\nrules:\n  - {id: kept, limit: 3, window: 1m}\n"
	if err := os.WriteFile(fx.cfg.SnapshotPath, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	p := fx.open(t) // the new database is at revision 0
	if st := p.Status(); !st.Refused || !strings.Contains(st.Error, "is at revision 0, lower than the revision 2 of this instance's snapshot") ||
		fmt.Sprint(ruleIDs(p.Current())) != "[kept]" {
		t.Errorf("Status %+v, rules %v; want the snapshot's rule kept and the revision named", st, ruleIDs(p.Current()))
	}
	p.Close()
	if readFile(t, fx.cfg.SnapshotPath) != old {
		t.Error("the snapshot was rewritten with revision 0")
	}
	if err := pgtest.Exec(url, `UPDATE sluice_state SET revision = 2`); err != nil {
		t.Fatal(err)
	}
	p = fx.open(t)
	id := query[string](t, url, `SELECT id::text FROM sluice_database`)
	if st := p.Status(); st.Refused || st.Error != "" || st.Database != id || p.Current().Revision() != 2 {
		t.Errorf("Status %+v at revision %d; want the database %s taken at revision 2", st, p.Current().Revision(), id)
	}
	if _, got, err := readSnapshot(fx.cfg.SnapshotPath); err != nil || got != id {
		t.Errorf("the snapshot names database %q (%v), want %s", got, err, id)
	}
}

// TestPostgresForeignDatabaseAhead: a replaced database that an instance
// without a snapshot took and wrote to, past the revision the others
// serve, is still another database: refused by identity, not revision.
func TestPostgresForeignDatabaseAhead(t *testing.T) {
	url := pgtest.NewDatabase(t)
	fx := newPGFixture(t, url)
	p := fx.open(t)
	run(t, p)
	ctx := context.Background()
	for i := range 3 {
		if _, err := p.Update(ctx, -1, addRule(rule(fmt.Sprintf("k%d", i), 1))); err != nil {
			t.Fatal(err)
		}
	}
	if err := pgtest.Replace(url); err != nil {
		t.Fatal(err)
	}
	other := newPGFixture(t, url).open(t) // no snapshot: it takes the empty database
	for i := range 5 {
		if _, err := other.Update(ctx, -1, addRule(rule(fmt.Sprintf("f%d", i), 1))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the store refuses the other database", func() bool {
		return strings.Contains(p.Status().Error, "is another database (id "+other.Status().Database+", revision 5)")
	}, fx)
	if got := ruleIDs(p.Current()); fmt.Sprint(got) != "[k0 k1 k2]" || p.Current().Revision() != 3 {
		t.Errorf("rules in force = %v at %d, want [k0 k1 k2] at 3", got, p.Current().Revision())
	}
}
