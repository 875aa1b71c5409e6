package admin

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/console"
	"github.com/sluicehq/sluice/internal/rulestore"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store/memory"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// consoleOn serves the admin API with the console over src, deciding
// with a limiter over st.
func consoleOn(t *testing.T, src rulestore.Source, st limiter.Store) (*env, *limiter.Limiter, *console.Hitters) {
	t.Helper()
	lim := limiter.New(st, limiter.Config{})
	lim.SetRules(src.Current())
	src.Subscribe(lim.SetRules)
	h := console.NewHitters(0, nil)
	c := &Console{Limiter: lim, Hitters: h, Instance: "gw-01:9090"}
	return &env{t: t, h: New(src, Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Console: c}), hdr: http.Header{}}, lim, h
}

// TestConsoleRedis: over a real Redis, explaining reads the buckets
// without taking, and the top list reads each caller's bucket.
func TestConsoleRedis(t *testing.T) {
	srv := redistest.Start(t)
	st, err := sredis.New(t.Context(), sredis.Config{Addrs: []string{srv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e0 := newEnv(t, Config{})
	e, lim, h := consoleOn(t, e0.src, st)
	e.must(e.do("PUT", "/rules/per-user", `{"limit": 3, "window": "1m"}`), 201)
	req := limiter.Request{User: "flood", Method: "GET", Path: "/"}
	for range 5 {
		d, err := lim.Check(t.Context(), &req)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			h.Denied(d.RuleID(), "user:flood")
		}
	}
	for range 3 {
		r := e.must(e.do("POST", "/explain", `{"user": "flood"}`), 200)
		if !strings.Contains(r.String(), `"bucket":"user:flood","limit":3,"remaining":0`) || !strings.Contains(r.String(), `"allowed":false`) {
			t.Fatalf("explain over Redis = %s, want user:flood at 0 of 3, denied", r.body)
		}
		r = e.must(e.do("POST", "/explain", `{"user": "quiet"}`), 200)
		if !strings.Contains(r.String(), `"remaining":3`) {
			t.Fatalf("explain of a fresh caller = %s, want 3 remaining, untouched", r.body)
		}
	}
	r := e.must(e.do("GET", "/console/api/top", ""), 200)
	if !strings.Contains(r.String(), `"caller":"user:flood","denials":2,"max_overcount":0,"limit":3,"remaining":0`) {
		t.Fatalf("top = %s, want user:flood denied twice, bucket 0 of 3", r.body)
	}
}

// TestConsolePostgresFleet: with the PostgreSQL rules store, revisions
// come from its history (with actors, including changes made by another
// instance), a rollback is recorded like any change, and the numbers say
// they are this instance's.
func TestConsolePostgresFleet(t *testing.T) {
	url := pgtest.NewDatabase(t)
	st := newMemoryStore(t)
	e, _, _ := consoleOn(t, pgStore(t, url), st)
	other := &env{t: t, h: New(pgStore(t, url), Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}), hdr: http.Header{}}
	e.must(e.do("PUT", "/rules/per-user", `{"limit": 3, "window": "1m"}`, ActorHeader, "alice"), 201)
	other.must(other.do("PUT", "/rules/per-user", `{"limit": 9, "window": "1m"}`, ActorHeader, "bob"), 200)
	// The history is the database's: it holds the other instance's change.
	rev := e.must(e.do("GET", "/console/api/revisions", ""), 200).String()
	if !strings.Contains(rev, "history") || !strings.Contains(rev, `"actors":["bob (192.0.2.1)"]`) || !strings.Contains(rev, `"actors":["alice (192.0.2.1)"]`) {
		t.Fatalf("revisions = %s, want the store's history with alice and bob", rev)
	}
	if r := e.must(e.do("GET", "/console/api/now", ""), 200); !strings.Contains(r.String(), "this instance only (gw-01:9090)") {
		t.Fatalf("now = %s, want it to say the numbers are this instance's", r.body)
	}
	if r := e.must(e.do("GET", "/console/api/diff?from=1&to=2", ""), 200); !strings.Contains(r.String(), `"limit":9`) {
		t.Fatalf("diff = %s, want limit 3 → 9", r.body)
	}
	e.must(e.do("POST", "/console/api/rollback", `{"revision": 1}`, "If-Match", `"2"`, ActorHeader, "carol"), 200)
	r := e.must(e.do("GET", "/history?limit=1", ""), 200)
	if !strings.Contains(r.String(), `"actor":"carol (192.0.2.1)"`) || !strings.Contains(r.String(), `"revision":3`) || !strings.Contains(r.String(), `"limit":3`) {
		t.Fatalf("history after rollback = %s, want revision 3 by carol back to limit 3", r.body)
	}
}

func newMemoryStore(t *testing.T) *memory.Store {
	t.Helper()
	st, err := memory.New(memory.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
