package admin

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestUnchangedWriteIsNoOp: a PUT that changes nothing — the same rule,
// client or default plan again — answers 200 with the revision it found:
// no new revision, no rewrite of the rules file, no history row.
func TestUnchangedWriteIsNoOp(t *testing.T) {
	writes := []struct{ path, body string }{
		{"/rules/a", ruleA},
		{"/rules/b", `{"id": "b", "limit": 5, "window": "1h", "by": "ip"}`},
		{"/clients/user:carol", `{"plan": "pro"}`},
		{"/default_plan", `{"plan": "partner"}`},
	}
	// state returns what a write would change in the store.
	check := func(t *testing.T, e *env, state func() string) {
		for _, w := range writes {
			e.do("PUT", w.path, w.body)
		}
		rev := revision(t, e.must(e.do("GET", "/rules", ""), 200))
		if rev != int64(len(writes)) {
			t.Fatalf("revision after %d writes = %d", len(writes), rev)
		}
		etag := `"` + strconv.FormatInt(rev, 10) + `"`
		for _, w := range writes {
			t.Run(w.path, func(t *testing.T) {
				before := state()
				r := e.do("PUT", w.path, w.body, "If-Match", etag)
				if r.status != 200 || revision(t, r) != rev || r.header.Get("ETag") != etag {
					t.Errorf("unchanged PUT %s = %d %s (ETag %s), want 200 at revision %d", w.path, r.status, r.body, r.header.Get("ETag"), rev)
				}
				if got := revision(t, e.must(e.do("GET", "/rules", ""), 200)); got != rev {
					t.Errorf("revision after an unchanged PUT %s = %d, want %d", w.path, got, rev)
				}
				if after := state(); after != before {
					t.Errorf("an unchanged PUT %s wrote to the store: %s, was %s", w.path, after, before)
				}
			})
		}
	}

	t.Run("file", func(t *testing.T) {
		e := newEnv(t, Config{})
		check(t, e, func() string {
			b, err := os.ReadFile(e.path)
			fi, serr := os.Stat(e.path)
			if err != nil || serr != nil {
				t.Fatal(err, serr)
			}
			return fmt.Sprintf("file of %d bytes, modified %s, hash %x", len(b), fi.ModTime(), sha256.Sum256(b))
		})
	})
	t.Run("postgres", func(t *testing.T) {
		e, url := newPGEnv(t)
		check(t, e, func() string {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			var revs, hist int64
			if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM sluice_revisions), (SELECT count(*) FROM sluice_history)`).Scan(&revs, &hist); err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf("%d sluice_revisions rows, %d sluice_history rows", revs, hist)
		})
		var h struct {
			History []json.RawMessage `json:"history"`
		}
		if err := json.Unmarshal(e.must(e.do("GET", "/history", ""), 200).body, &h); err != nil || len(h.History) != len(writes) {
			t.Errorf("GET /history has %d entries (%v), want %d: one per real change", len(h.History), err, len(writes))
		}
	})
}
