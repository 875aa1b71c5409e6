package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/rulestore"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
	"github.com/sluicehq/sluice/rules"
)

// TestRulesRestore: sluice rules restore checks its flags, reads the
// database from SLUICE_RULES, and puts a snapshot's rules into a replaced
// database at the next revision.
func TestRulesRestore(t *testing.T) {
	t.Setenv("SLUICE_RULES", "")
	if code, _, stderr := sluice(t, "", "rules", "restore", "--rules", "postgres://x@127.0.0.1/x"); code == 0 || !strings.Contains(stderr, "--from-snapshot FILE is required") {
		t.Errorf("restore without --from-snapshot: exit %d, %q; want a failure asking for it", code, stderr)
	}
	if code, _, stderr := sluice(t, "", "rules", "restore", "--from-snapshot", "s.yaml", "--rules", "sluice-rules.yaml"); code == 0 || !strings.Contains(stderr, "must name the rules database") {
		t.Errorf("restore with a rules file: exit %d, %q; want a failure asking for a database", code, stderr)
	}

	url := pgtest.NewDatabase(t)
	snap := filepath.Join(t.TempDir(), "snap.yaml")
	ctx := context.Background()
	p, err := rulestore.OpenPostgres(ctx, rulestore.PostgresConfig{URL: url, SnapshotPath: snap})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		if _, err := p.Update(ctx, -1, func(s *rules.Set) error {
			s.Rules = append(s.Rules, rules.Rule{ID: id, Limit: 5, Window: rules.Duration(time.Minute)})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	p.Close()
	if err := pgtest.Replace(url); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLUICE_RULES", url)
	code, stdout, stderr := sluice(t, "", "rules", "restore", "--from-snapshot", snap)
	if code != 0 || !strings.Contains(stdout, "restored 3 rules and 0 clients from "+snap) || !strings.Contains(stdout, "as revision 4") {
		t.Fatalf("restore: exit %d\n%s%s\nwant 3 rules restored as revision 4", code, stdout, stderr)
	}
	q, err := rulestore.OpenPostgres(ctx, rulestore.PostgresConfig{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if got := q.Current(); got.Revision() != 4 || len(got.Rules()) != 3 {
		t.Errorf("the database after the restore: %d rules at revision %d, want 3 at 4", len(got.Rules()), got.Revision())
	}
	hs, err := q.History(ctx, rulestore.HistoryQuery{Kind: rulestore.KindRule, ID: "a"})
	if err != nil || len(hs) != 1 || !strings.HasPrefix(hs[0].Actor, "sluice rules restore (") {
		t.Errorf("history of a = %+v, %v; want one create by sluice rules restore (user@host)", hs, err)
	}
	if code, _, stderr := sluice(t, "", "rules", "restore", "--from-snapshot", snap); code == 0 || !strings.Contains(stderr, "was restored already") || !strings.Contains(stderr, "nothing to restore") {
		t.Errorf("a second restore: exit %d, %q; want nothing to restore", code, stderr)
	}
}
