package admin

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/pgtest"
)

// TestPostgresRevisionAfterTrim: after docs/fleet.md's trim of the history
// (revisions before 3 deleted), GET /rules?revision=N and
// /clients?revision=N answer for every revision from 3 on, rules that last
// changed before the cutoff included, and 410 gone naming revision 3 for
// the older ones.
func TestPostgresRevisionAfterTrim(t *testing.T) {
	e, url := newPGEnv(t)
	e.must(e.do("PUT", "/rules/a", `{"limit": 1, "window": "1m"}`), 201) // 1
	e.must(e.do("PUT", "/clients/user:carol", `{"plan": "pro"}`), 201)   // 2
	e.must(e.do("PUT", "/rules/b", `{"limit": 2, "window": "1m"}`), 201) // 3
	e.must(e.do("PUT", "/rules/b", `{"limit": 3, "window": "1m"}`), 200) // 4
	if err := pgtest.Exec(url, `BEGIN;
		DELETE FROM sluice_history   WHERE revision < 3;
		DELETE FROM sluice_revisions WHERE revision < 3;
		COMMIT`); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path   string
		status int
		want   []string
	}{
		{"/rules?revision=3", 200, []string{`"revision":3`, `"id":"a","match":{},"limit":1`, `"id":"b","match":{},"limit":2`}},
		{"/rules?revision=4", 200, []string{`"revision":4`, `"id":"a","match":{},"limit":1`, `"id":"b","match":{},"limit":3`}},
		{"/clients?revision=3", 200, []string{`"user:carol":{"plan":"pro"}`}},
		{"/rules?revision=2", 410, []string{`"error":"gone"`, "revision 2", "the oldest revision kept is 3"}},
		{"/clients?revision=1", 410, []string{`"error":"gone"`, "revision 1", "the oldest revision kept is 3"}},
		{"/rules?revision=0", 410, []string{`"error":"gone"`, "the oldest revision kept is 3"}},
		{"/rules?revision=5", 404, []string{"revision 5 does not exist; the current revision is 4"}},
	} {
		r := e.do("GET", tc.path, "")
		if r.status != tc.status {
			t.Errorf("GET %s = %d %s, want %d", tc.path, r.status, r.body, tc.status)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(string(r.body), w) {
				t.Errorf("GET %s = %d %s, want it to contain %s", tc.path, r.status, r.body, w)
			}
		}
	}
}
