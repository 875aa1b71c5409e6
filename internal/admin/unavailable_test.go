package admin

import (
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/pgtest"
)

// wantUnavailable checks that a write was answered 503 unavailable with a
// message naming each of causes, and that the revision did not move.
func wantUnavailable(t *testing.T, e *env, r resp, rev string, causes ...string) {
	t.Helper()
	if r.status != http.StatusServiceUnavailable {
		t.Fatalf("status = %d %s, want 503", r.status, r.body)
	}
	m := r.json(t)
	if m["error"] != CodeUnavailable {
		t.Errorf("error = %v, want %q", m["error"], CodeUnavailable)
	}
	for _, c := range causes {
		if msg, _ := m["message"].(string); !strings.Contains(msg, c) {
			t.Errorf("message = %q, want it to name %q", msg, c)
		}
	}
	if got := e.do("GET", "/rules", "").header.Get("ETag"); got != rev {
		t.Errorf("revision after a refused write = %s, want %s", got, rev)
	}
}

// TestReadOnlyRulesFileIs503: PUT, DELETE and POST /apply on a rules file
// set read-only (chmod 0444) are refused with 503 naming the file, and the
// file is not replaced.
func TestReadOnlyRulesFileIs503(t *testing.T) {
	e := newEnv(t, Config{})
	e.must(e.do("PUT", "/rules/a", ruleA), 201)
	if err := os.Chmod(e.path, 0o444); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(e.path)
	for _, w := range []struct{ method, path, body string }{
		{"PUT", "/rules/b", `{"limit": 1, "window": "1m"}`},
		{"DELETE", "/rules/a", ""},
		{"PUT", "/default_plan", `{"plan": "partner"}`},
		{"POST", "/apply", `{"rules": []}`},
	} {
		t.Run(w.method+" "+w.path, func(t *testing.T) {
			r := e.do(w.method, w.path, w.body, "Content-Type", "application/json")
			wantUnavailable(t, e, r, `"1"`, "read-only", e.path, "chmod u+w")
		})
	}
	if after, _ := os.ReadFile(e.path); string(after) != string(before) {
		t.Errorf("the read-only rules file was replaced")
	}
}

// TestDatabaseFailuresAre503: a write the rules database cannot take — it
// is stopped, it was dropped, or it refuses the change — is answered 503
// naming the cause, never 500.
func TestDatabaseFailuresAre503(t *testing.T) {
	t.Run("server stopped", func(t *testing.T) {
		srv := pgtest.StartServer(t)
		e := &env{t: t, h: New(pgStore(t, srv.URL("postgres")), Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}), hdr: http.Header{}}
		e.must(e.do("PUT", "/rules/a", ruleA), 201)
		srv.Stop()
		wantUnavailable(t, e, e.do("PUT", "/rules/b", ruleA), `"1"`, "unreachable")
	})
	t.Run("database dropped", func(t *testing.T) {
		e, url := newPGEnv(t)
		e.must(e.do("PUT", "/rules/a", ruleA), 201)
		db := url[strings.LastIndex(url, "/")+1:]
		db, _, _ = strings.Cut(db, "?")
		if err := pgtest.Exec(pgtest.AdminURL(), "DROP DATABASE "+db+" WITH (FORCE)"); err != nil {
			t.Fatal(err)
		}
		wantUnavailable(t, e, e.do("PUT", "/rules/b", ruleA), `"1"`, "does not exist")
	})
	t.Run("change refused", func(t *testing.T) {
		e, url := newPGEnv(t)
		e.must(e.do("PUT", "/rules/a", ruleA), 201)
		if err := pgtest.Exec(url, `CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN RAISE EXCEPTION 'boom refused'; END $$;
			CREATE TRIGGER boom BEFORE INSERT ON sluice_rules FOR EACH ROW EXECUTE FUNCTION boom()`); err != nil {
			t.Fatal(err)
		}
		wantUnavailable(t, e, e.do("PUT", "/rules/b", ruleA), `"1"`, "refused", "boom refused")
	})
}

// TestBrokenHandEditIs503: while the rules file holds a hand edit that
// does not load — a YAML syntax error, an unknown field, a limit of -1 —
// every write is 503 naming the file and its error (the README's
// promise), never a 400 that reads as if the request body were wrong.
func TestBrokenHandEditIs503(t *testing.T) {
	for _, tc := range []struct{ name, body, cause string }{
		{"syntax", "rules: [\n", "yaml"},
		{"unknown field", "rules:\n  - id: a\n    limt: 10\n    window: 1m\n", "limt"},
		{"limit -1", "rules:\n  - id: a\n    limit: -1\n    window: 1m\n", "limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Config{})
			e.must(e.do("PUT", "/rules/a", ruleA), 201)
			if err := os.WriteFile(e.path, []byte(tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, w := range []struct{ method, path, body string }{
				{"PUT", "/rules/b", `{"limit": 1, "window": "1m"}`},
				{"DELETE", "/rules/a", ""},
				{"POST", "/apply", `{"rules": []}`},
			} {
				r := e.do(w.method, w.path, w.body, "Content-Type", "application/json")
				wantUnavailable(t, e, r, `"1"`, e.path, tc.cause, "fix or revert the file")
			}
		})
	}
}
