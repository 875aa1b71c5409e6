package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/testkit/listentest"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
)

// Fleet tests: `sluice serve` processes sharing a PostgreSQL rules store
// (docs/fleet.md).

// limitOn returns the limit of the rule the instance applies to a fresh
// caller of endpoint (0 when no rule matches).
func (in *instance) limitOn(t testing.TB, endpoint string) int64 {
	t.Helper()
	a, _ := in.check(t, map[string]any{"user": fmt.Sprintf("probe-%d", time.Now().UnixNano()), "endpoint": endpoint})
	if a.Rule == nil {
		return 0
	}
	return a.Limit
}

// waitLimit polls in every millisecond until it applies limit to endpoint and
// returns how long that took, or fails after within.
func (in *instance) waitLimit(t testing.TB, endpoint string, limit int64, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		if in.limitOn(t, endpoint) == limit {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("%s: limit %d not in force on %s after %s (now %d); log:\n%s", endpoint, limit, in.data, within, in.limitOn(t, endpoint), in.log)
		}
		time.Sleep(time.Millisecond)
	}
}

// readyRules returns the "rules" part of the instance's /readyz.
func (in *instance) readyRules(t testing.TB) map[string]any {
	t.Helper()
	var ready map[string]any
	if resp := do(t, "GET", in.data+"/readyz", nil, &ready); resp.StatusCode != 200 {
		t.Fatalf("/readyz = %d %v, want 200", resp.StatusCode, ready)
	}
	rs, _ := ready["rules"].(map[string]any)
	return rs
}

// putLimit stores rule id on endpoint with the given limit through in's
// admin API and returns the status.
func (in *instance) putLimit(t testing.TB, id, endpoint string, limit int64, header ...string) (int, map[string]any) {
	t.Helper()
	var out map[string]any
	body := map[string]any{"id": id, "limit": limit, "window": "1h", "match": map[string]any{"endpoint": endpoint}}
	resp := doWith(t, "PUT", in.admin+"/rules/"+id, body, &out, header...)
	return resp.StatusCode, out
}

// listeners returns how many sessions LISTEN for rule changes on the
// database url names (pg_stat_activity shows LISTEN as the last query of
// the idle session).
func listeners(t testing.TB, url string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return -1
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query = 'LISTEN sluice_rules'`).Scan(&n); err != nil {
		return -1
	}
	return n
}

// durations summarizes measured times: median, p90 and max.
func durations(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	return fmt.Sprintf("median %s, p90 %s, max %s over %d changes", r(s[len(s)/2]), r(s[len(s)*9/10]), r(s[len(s)-1]), len(s))
}

// fleetChanges is how many changes TestFleetPropagation measures:
// $SLUICE_FLEET_CHANGES (for the figures in docs/fleet.md), default 20.
func fleetChanges(t testing.TB) int {
	v := os.Getenv("SLUICE_FLEET_CHANGES")
	if v == "" {
		return 20
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 10000 {
		t.Fatalf("SLUICE_FLEET_CHANGES=%q: want 1 to 10000", v)
	}
	return n
}

// TestFleetPropagation: a PUT on one instance is enforced by another within
// 1 s through LISTEN/NOTIFY, and within the refresh interval (1 s here)
// with notifications off. The measured times are logged (docs/fleet.md).
func TestFleetPropagation(t *testing.T) {
	url := pgtest.NewDatabase(t)
	t.Run("notify", func(t *testing.T) {
		a, b := serve(t, url), serve(t, url)
		// The rule is enforced, not only listed: limit 1 denies b's second call.
		if st, out := a.putLimit(t, "prop", "GET /prop", 1); st != 201 {
			t.Fatalf("PUT = %d %v", st, out)
		}
		b.waitLimit(t, "GET /prop", 1, time.Second)
		call := map[string]any{"user": "carol", "endpoint": "GET /prop"}
		if first, _ := b.check(t, call); !first.Allowed {
			t.Fatalf("first call on b = %+v, want allowed", first)
		}
		if second, _ := b.check(t, call); second.Allowed || second.Rule == nil || *second.Rule != "prop" {
			t.Fatalf("second call on b = %+v, want denied by prop", second)
		}
		var took []time.Duration
		n := fleetChanges(t)
		for i := range n {
			limit := int64(100 + i)
			if st, out := a.putLimit(t, "prop", "GET /prop", limit); st != 200 {
				t.Fatalf("PUT = %d %v", st, out)
			}
			took = append(took, b.waitLimit(t, "GET /prop", limit, time.Second))
		}
		t.Logf("NOTIFY: PUT answered on one instance → in force on the other: %s", durations(took))
		if rs := b.readyRules(t); rs["source"] != "postgres" || rs["revision"] != float64(n+1) || rs["error"] != nil {
			t.Errorf("b's /readyz rules = %v, want postgres at revision %d without error", rs, n+1)
		}
	})
	t.Run("refresh only", func(t *testing.T) {
		c := serve(t, url, "--rules-notify=false", "--rules-refresh", "1s")
		d := serve(t, url, "--rules-notify=false", "--rules-refresh", "1s")
		var took []time.Duration
		for i := range 3 {
			limit := int64(200 + i)
			if st, out := c.putLimit(t, "prop", "GET /prop", limit); st != 200 {
				t.Fatalf("PUT = %d %v", st, out)
			}
			took = append(took, d.waitLimit(t, "GET /prop", limit, 2*time.Second))
		}
		t.Logf("refresh only (--rules-refresh 1s): %s", durations(took))
	})
}

// TestFleetIfMatchConflict: two PUTs with the same If-Match on two
// instances: one wins, the other gets 412.
func TestFleetIfMatchConflict(t *testing.T) {
	url := pgtest.NewDatabase(t)
	a, b := serve(t, url), serve(t, url)
	etag := `"0"`
	for round := range 5 {
		var wg sync.WaitGroup
		st := make([]int, 2)
		tags := make([]string, 2)
		for i, in := range []*instance{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body := map[string]any{"id": "race", "limit": 10 + 2*round + i, "window": "1m"} // a new value each round: an unchanged PUT is a no-op
				resp := doWith(t, "PUT", in.admin+"/rules/race", body, nil, "If-Match", etag)
				st[i], tags[i] = resp.StatusCode, resp.Header.Get("ETag")
			}()
		}
		wg.Wait()
		won := slices.IndexFunc(st, func(s int) bool { return s == 200 || s == 201 })
		if won < 0 || st[1-won] != 412 {
			t.Fatalf("round %d: statuses %v for If-Match %s, want one 2xx and one 412", round, st, etag)
		}
		etag = tags[won]
	}
}

// TestFleetApplyAllOrNothing: `sluice rules apply -f` with one invalid rule
// changes nothing (and POST /apply of such a document, past the CLI's own
// check, neither); a valid file is one change, in force on every instance.
func TestFleetApplyAllOrNothing(t *testing.T) {
	url := pgtest.NewDatabase(t)
	a, b := serve(t, url), serve(t, url)
	if st, _ := a.putLimit(t, "old", "GET /old", 5); st != 201 {
		t.Fatal("PUT old")
	}
	b.waitLimit(t, "GET /old", 5, 2*time.Second)
	dir := t.TempDir()
	apply := func(content string) (string, error) {
		path := filepath.Join(dir, "rules.yaml")
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, binary, "rules", "apply", "-f", path, "--admin", a.admin).CombinedOutput()
		return string(out), err
	}
	bad := `rules:
  - {id: n1, limit: 1, window: 1m, match: {endpoint: "GET /n1"}}
  - {id: n2, limit: -1, window: 1m}
  - {id: n3, limit: 3, window: 1m}
`
	out, err := apply(bad)
	if err == nil || !strings.Contains(out, "limit") {
		t.Fatalf("apply of an invalid file: %v\n%s\nwant a failure naming limit", err, out)
	}
	var doc map[string]any
	resp := do(t, "POST", a.admin+"/apply", `{"rules": [{"id": "n1", "limit": 1, "window": "1m"}, {"id": "n2", "limit": -1, "window": "1m"}]}`, &doc)
	if resp.StatusCode != 400 {
		t.Fatalf("POST /apply of an invalid document = %d %v, want 400", resp.StatusCode, doc)
	}
	for _, in := range []*instance{a, b} {
		var list map[string]any
		do(t, "GET", in.admin+"/rules", nil, &list)
		if list["revision"] != float64(1) || len(list["rules"].([]any)) != 1 {
			t.Errorf("after the failed applies %s has %v, want revision 1 with rule old only", in.admin, list)
		}
	}

	out, err = apply(`rules:
  - {id: n1, limit: 1, window: 1m, match: {endpoint: "GET /n1"}}
  - {id: n2, limit: 2, window: 1m, match: {endpoint: "GET /n2"}}
  - {id: n3, limit: 3, window: 1m, match: {endpoint: "GET /n3"}}
`)
	if err != nil || !strings.Contains(out, "3 created") || !strings.Contains(out, "1 deleted") || !strings.Contains(out, "revision 2") {
		t.Fatalf("apply: %v\n%s\nwant 3 created, 1 deleted, revision 2", err, out)
	}
	for _, ep := range []string{"GET /n1", "GET /n2", "GET /n3"} {
		b.waitLimit(t, ep, int64(ep[len(ep)-1]-'0'), 2*time.Second)
	}
	var h map[string]any
	do(t, "GET", a.admin+"/history", nil, &h)
	if n := len(h["history"].([]any)); n != 5 {
		t.Errorf("history has %d entries, want 5 (old created; n1-n3 created and old deleted in one revision): %v", n, h)
	}
}

// TestFleetOutage: PostgreSQL stopped under two instances: decisions go on
// with the rules in force, writes get 503 with a clear message, /readyz
// stays 200 and says why; after a restart both recover by themselves.
func TestFleetOutage(t *testing.T) {
	srv := pgtest.StartServer(t)
	url := srv.NewDatabase(t)
	a := serve(t, url, "--rules-refresh", "1s")
	b := serve(t, url, "--rules-refresh", "1s")
	if st, _ := a.putLimit(t, "guard", "GET /guard", 3); st != 201 {
		t.Fatal("PUT guard")
	}
	b.waitLimit(t, "GET /guard", 3, 2*time.Second)

	srv.Stop()
	for _, in := range []*instance{a, b} {
		call := map[string]any{"user": "erin", "endpoint": "GET /guard"}
		for i := 1; i <= 4; i++ {
			got, _ := in.check(t, call)
			if got.Allowed != (i <= 3) || got.Rule == nil || *got.Rule != "guard" {
				t.Fatalf("%s call %d with the database down = %+v, want allowed only for the first 3", in.data, i, got)
			}
		}
	}
	st, out := a.putLimit(t, "guard", "GET /guard", 4)
	if msg, _ := out["message"].(string); st != 503 || out["error"] != "unavailable" || !strings.Contains(msg, "unreachable") || !strings.Contains(msg, "revision 1") {
		t.Fatalf("PUT with the database down = %d %v, want 503 unavailable saying the database is unreachable and revision 1 stays", st, out)
	}
	for _, in := range []*instance{a, b} {
		waitFor(t, 5*time.Second, func() bool {
			e, _ := in.readyRules(t)["error"].(string)
			return strings.Contains(e, "unreachable")
		})
	}

	down := time.Now()
	srv.Start()
	restarted := time.Now()
	var st2 int
	for {
		if st2, _ = a.putLimit(t, "guard", "GET /guard", 4); st2 == 200 {
			break
		}
		if time.Since(restarted) > 20*time.Second {
			t.Fatalf("PUT still %d 20s after the database restarted; log:\n%s", st2, a.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("database down %s; first write accepted %s after the restart", restarted.Sub(down).Round(time.Millisecond), time.Since(restarted).Round(time.Millisecond))
	took := b.waitLimit(t, "GET /guard", 4, 5*time.Second)
	t.Logf("the first change after the outage in force on the other instance after %s", took)
	for _, in := range []*instance{a, b} {
		waitFor(t, 5*time.Second, func() bool { return in.readyRules(t)["error"] == nil })
	}
	// Notifications are back too: the next change arrives within a second.
	waitFor(t, 10*time.Second, func() bool { return listeners(t, url) == 2 })
	a.putLimit(t, "guard", "GET /guard", 5)
	b.waitLimit(t, "GET /guard", 5, time.Second)
}

// TestFleetStartFromSnapshot: with the database down, an instance started
// with --rules-snapshot serves the snapshot's rules (and says the database
// is unreachable); without a snapshot it refuses to start. When the
// database is back the instance connects by itself.
func TestFleetStartFromSnapshot(t *testing.T) {
	srv := pgtest.StartServer(t)
	url := srv.NewDatabase(t)
	snap := filepath.Join(t.TempDir(), "rules-snapshot.yaml")
	a := serve(t, url, "--rules-snapshot", snap)
	a.putLimit(t, "snap", "GET /snap", 7)
	if b, err := os.ReadFile(snap); err != nil || !strings.Contains(string(b), "id: snap") {
		t.Fatalf("snapshot after a PUT = %q, %v; want rule snap", b, err)
	}
	a.stop()
	srv.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "serve", "--rules", url,
		"--listen", listentest.FreeAddr(t), "--admin-listen", listentest.FreeAddr(t))
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), "unreachable") || !strings.Contains(stderr.String(), "--rules-snapshot") {
		t.Errorf("serve with the database down and no snapshot: %v\n%s\nwant a failure pointing at --rules-snapshot", err, stderr.String())
	}

	b := serve(t, url, "--rules-snapshot", snap, "--rules-refresh", "1s")
	if got := b.limitOn(t, "GET /snap"); got != 7 {
		t.Fatalf("instance started on the snapshot applies limit %d, want 7", got)
	}
	if rs := b.readyRules(t); !strings.Contains(fmt.Sprint(rs["error"]), "unreachable") || rs["revision"] != float64(1) {
		t.Errorf("/readyz rules = %v, want revision 1 with the database unreachable", rs)
	}
	srv.Start()
	waitFor(t, 10*time.Second, func() bool { return b.readyRules(t)["error"] == nil })
	if st, out := b.putLimit(t, "snap", "GET /snap", 8); st != 200 {
		t.Fatalf("PUT after the database is back = %d %v", st, out)
	}
	b.waitLimit(t, "GET /snap", 8, time.Second)
}
