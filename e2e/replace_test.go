package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/pgtest"
)

// replacedRules is how many rules TestFleetReplacedDatabase holds.
const replacedRules = 300

// metrics returns in's /metrics page.
func (in *instance) metrics(t testing.TB) string {
	t.Helper()
	resp, err := http.Get(in.data + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// metric returns the value line of an unlabelled metric on in's /metrics.
func (in *instance) metric(t testing.TB, name string) string {
	t.Helper()
	for line := range strings.Lines(in.metrics(t)) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// ruleCount returns the revision and the number of rules of in's GET /rules.
func (in *instance) ruleCount(t testing.TB) (int64, int) {
	t.Helper()
	var list struct {
		Revision int64            `json:"revision"`
		Rules    []map[string]any `json:"rules"`
	}
	if resp := do(t, "GET", in.admin+"/rules", nil, &list); resp.StatusCode != 200 {
		t.Fatalf("GET /rules = %d", resp.StatusCode)
	}
	return list.Revision, len(list.Rules)
}

// TestFleetReplacedDatabase is the replaced-database sequence with the
// built binary: two instances with snapshots on one database; the database
// is dropped (a write gets 503, not 500) and created again empty; one
// instance restarts and migrates it to revision 0. Neither takes the empty
// database: both keep every rule, /readyz (still 200) says "refused" and
// why, sluice_rules_database_refused is 1, writes get 503 naming the
// restore command, and the snapshots stay as they were. `sluice rules
// restore --from-snapshot` then puts the rules into the new database at the
// next revision, both instances take it, and no rule is lost anywhere.
func TestFleetReplacedDatabase(t *testing.T) {
	url := pgtest.NewDatabase(t)
	dir := t.TempDir()
	snapA, snapB := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	a := serve(t, url, "--rules-snapshot", snapA, "--rules-refresh", "1s")
	b := serve(t, url, "--rules-snapshot", snapB, "--rules-refresh", "1s")

	var file strings.Builder
	file.WriteString("default_plan: free\nclients:\n  user:bob: {plan: pro}\nrules:\n")
	for i := range replacedRules {
		fmt.Fprintf(&file, "  - {id: r%03d, limit: %d, window: 1h, match: {endpoint: \"GET /r%03d\"}}\n", i, i+1, i)
	}
	rulesFile := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte(file.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, binary, args...).CombinedOutput()
		return string(out), err
	}
	if out, err := run("rules", "apply", "-f", rulesFile, "--admin", a.admin); err != nil {
		t.Fatalf("rules apply: %v\n%s", err, out)
	}
	for i := range 9 { // more revisions: 10 in all
		if st, out := a.putLimit(t, "r000", "GET /r000", int64(100+i)); st != 200 {
			t.Fatalf("PUT = %d %v", st, out)
		}
	}
	const rev = 10
	b.waitLimit(t, "GET /r000", 108, 5*time.Second)
	waitFor(t, 5*time.Second, func() bool {
		s, err := os.ReadFile(snapB)
		return err == nil && strings.Contains(string(s), "revision: 10")
	})
	before := map[string]string{}
	for _, p := range []string{snapA, snapB} {
		s, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		before[p] = string(s)
	}

	if err := pgtest.DropDatabase(url); err != nil {
		t.Fatal(err)
	}
	st, out := b.putLimit(t, "new", "GET /new", 1)
	if msg, _ := out["message"].(string); st != 503 || out["error"] != "unavailable" || !strings.Contains(msg, "does not exist") {
		t.Errorf("PUT while the database is missing = %d %v, want 503 unavailable saying it does not exist", st, out)
	}
	if err := pgtest.CreateDatabase(url); err != nil {
		t.Fatal(err)
	}
	a.restart() // migrates the new database: revision 0

	for _, in := range []*instance{a, b} {
		waitFor(t, 10*time.Second, func() bool {
			rs := in.readyRules(t)
			e, _ := rs["error"].(string)
			return rs["refused"] == true && strings.Contains(e, "is another database")
		})
		rs := in.readyRules(t) // 200: the instance still decides with its rules
		e, _ := rs["error"].(string)
		if rs["revision"] != float64(rev) || !strings.Contains(e, "is another database") || !strings.Contains(e, "sluice rules restore --from-snapshot") {
			t.Errorf("%s /readyz rules = %v, want revision %d, refused, saying why and how to restore", in.admin, rs, rev)
		}
		if got := in.metric(t, "sluice_rules_database_refused"); got != "1" {
			t.Errorf("%s sluice_rules_database_refused = %q, want 1", in.data, got)
		}
		if r, n := in.ruleCount(t); r != rev || n != replacedRules {
			t.Errorf("%s serves %d rules at revision %d, want %d at %d", in.admin, n, r, replacedRules, rev)
		}
		if got := in.limitOn(t, "GET /r299"); got != 300 {
			t.Errorf("%s applies limit %d to GET /r299, want 300", in.data, got)
		}
		st, out := in.putLimit(t, "new", "GET /new", 1)
		if msg, _ := out["message"].(string); st != 503 || out["error"] != "unavailable" || !strings.Contains(msg, "sluice rules restore") {
			t.Errorf("%s PUT on the replaced database = %d %v, want 503 unavailable naming the restore", in.admin, st, out)
		}
	}
	for p, s := range before {
		if got, _ := os.ReadFile(p); string(got) != s {
			t.Errorf("snapshot %s was rewritten while the database was refused:\n%.400s", p, got)
		}
	}

	out2, err := run("rules", "restore", "--from-snapshot", snapB, "--rules", url)
	if err != nil || !strings.Contains(out2, fmt.Sprintf("restored %d rules and 1 clients", replacedRules)) || !strings.Contains(out2, "as revision 11") {
		t.Fatalf("rules restore: %v\n%s\nwant %d rules restored as revision 11", err, out2, replacedRules)
	}
	restored := time.Now()
	for _, in := range []*instance{a, b} {
		waitFor(t, 10*time.Second, func() bool {
			rs := in.readyRules(t)
			return rs["revision"] == float64(rev+1) && rs["refused"] == nil && rs["error"] == nil
		})
		t.Logf("%s serves the restored database %s after the restore command returned", in.admin, time.Since(restored).Round(time.Millisecond))
		if r, n := in.ruleCount(t); r != rev+1 || n != replacedRules {
			t.Errorf("%s serves %d rules at revision %d after the restore, want %d at %d", in.admin, n, r, replacedRules, rev+1)
		}
		if got := in.metric(t, "sluice_rules_database_refused"); got != "0" {
			t.Errorf("%s sluice_rules_database_refused = %q after the restore, want 0", in.data, got)
		}
		if got := in.limitOn(t, "GET /r000"); got != 108 {
			t.Errorf("%s applies limit %d to GET /r000 after the restore, want 108", in.data, got)
		}
	}
	if st, out := b.putLimit(t, "new", "GET /new", 5); st != 201 {
		t.Fatalf("PUT after the restore = %d %v", st, out)
	}
	a.waitLimit(t, "GET /new", 5, 5*time.Second)
	var clients map[string]any
	do(t, "GET", a.admin+"/clients", nil, &clients)
	if fmt.Sprint(clients["clients"]) != "map[user:bob:map[plan:pro]]" || clients["default_plan"] != "free" {
		t.Errorf("GET /clients after the restore = %v, want bob on pro and default plan free", clients)
	}
	a.stop() // its log is complete (and no longer written) once it exited
	if l := a.log.String(); !strings.Contains(l, "refusing the rules database") || !strings.Contains(l, "sluice rules restore --from-snapshot "+snapA) ||
		!strings.Contains(l, "the rules database is accepted again") {
		t.Errorf("the restarted instance's log does not say it refuses the database, how to restore, and that it took it again:\n%s", l)
	}
}
