package admin

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"testing"
	"time"
)

// TestDryRunIsApply: POST /apply?dry_run answers what the same apply
// answers — the same status, the same changes, built on the same head —
// because it goes through the same store code, which only stores nothing:
// over a rules file with a broken hand edit pending (503 for both, where a
// dry run that only compiled said 200), over a read-only rules file (503),
// on an instance that has not yet loaded a change made through another
// (the changes against the database's head, not the stale copy), and in
// the plain case.
func TestDryRunIsApply(t *testing.T) {
	const doc = `{"rules": [{"id": "a", "limit": 11, "window": "1m"}, {"id": "c", "limit": 5, "window": "1s"}]}`
	cases := []struct {
		name  string
		setup func(t *testing.T) (dry, real *env)
	}{
		{"plain", func(t *testing.T) (*env, *env) {
			e := newEnv(t, Config{})
			seed(e)
			return e, e
		}},
		{"broken hand edit pending", func(t *testing.T) (*env, *env) {
			e := newEnv(t, Config{})
			seed(e)
			if err := os.WriteFile(e.path, []byte("rules: [\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			now := time.Now().Add(time.Hour)
			os.Chtimes(e.path, now, now)
			return e, e
		}},
		{"read-only rules file", func(t *testing.T) (*env, *env) {
			e := newEnv(t, Config{})
			seed(e)
			if err := os.Chmod(e.path, 0o444); err != nil {
				t.Fatal(err)
			}
			return e, e
		}},
		{"instance behind the database", func(t *testing.T) (*env, *env) {
			e, url := newPGEnv(t) // no refresh: it sees only its own writes
			seed(e)
			other := &env{t: t, h: New(pgStore(t, url), Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}), hdr: http.Header{}}
			other.must(other.do("PUT", "/rules/b", `{"limit": 21, "window": "1m"}`), 200) // revision 4, unseen by e
			return e, e
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dryEnv, realEnv := tc.setup(t)
			before := dryEnv.do("GET", "/rules", "").header.Get("ETag")
			dry := dryEnv.do("POST", "/apply?dry_run=true", doc, "If-Match", "*")
			if got := dryEnv.do("GET", "/rules", "").header.Get("ETag"); got != before {
				t.Errorf("the dry run moved the revision from %s to %s", before, got)
			}
			real := realEnv.do("POST", "/apply", doc, "If-Match", "*")
			if dry.status != real.status {
				t.Fatalf("dry run = %d %s, apply = %d %s; want the same status", dry.status, dry.body, real.status, real.body)
			}
			if real.status != 200 {
				if m, n := dry.json(t)["message"], real.json(t)["message"]; m != n {
					t.Errorf("dry run message %q, apply message %q; want the same", m, n)
				}
				return
			}
			var d, r applyResult
			if err := json.Unmarshal(dry.body, &d); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(real.body, &r); err != nil {
				t.Fatal(err)
			}
			if !d.DryRun || r.DryRun {
				t.Errorf("dry_run = %v, %v; want true, false", d.DryRun, r.DryRun)
			}
			if dk, rk := changeKeys(d.Changes), changeKeys(r.Changes); !slices.Equal(dk, rk) {
				t.Errorf("dry run changes %v, apply changes %v; want the same", dk, rk)
			}
			if d.Revision != r.Revision-1 {
				t.Errorf("dry run at revision %d, apply stored %d; want the dry run at the revision the apply built on", d.Revision, r.Revision)
			}
		})
	}
}
