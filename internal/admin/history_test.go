package admin

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/rulestore"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
)

// newPGEnv serves the admin API over a PostgreSQL rules store on a fresh
// database; more stores on the same database come from pgStore.
func newPGEnv(t *testing.T) (*env, string) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	return &env{t: t, h: New(pgStore(t, url), Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}), hdr: http.Header{}}, url
}

func pgStore(t *testing.T, url string) *rulestore.Postgres {
	t.Helper()
	p, err := rulestore.OpenPostgres(context.Background(), rulestore.PostgresConfig{
		URL:    url,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Tick:   func(time.Duration) (<-chan time.Time, func()) { return nil, func() {} },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestHistoryNeedsPostgres(t *testing.T) {
	e := newEnv(t, Config{})
	for _, tc := range []struct {
		path   string
		status int
	}{
		{"/rules/a/history", 404},
		{"/history", 404},
		{"/rules?revision=0", 400},
		{"/clients?revision=0", 400},
	} {
		t.Run(tc.path, func(t *testing.T) {
			r := e.do("GET", tc.path, "")
			if r.status != tc.status || !strings.Contains(r.json(t)["message"].(string), "needs the postgres rules store") {
				t.Errorf("GET %s = %d %s, want %d saying it needs the postgres rules store", tc.path, r.status, r.body, tc.status)
			}
		})
	}
}

func TestActorHeader(t *testing.T) {
	e := newEnv(t, Config{})
	for _, tc := range []struct {
		name, actor string
		status      int
	}{
		{"none", "", 201},
		{"name", "alice", 200},
		{"too long", strings.Repeat("a", 129), 400},
		{"control character", "al\x01ice", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("PUT", "/rules/a", ruleA, ActorHeader, tc.actor)
			if r.status != tc.status {
				t.Errorf("PUT with %s %q = %d %s, want %d", ActorHeader, tc.actor, r.status, r.body, tc.status)
			}
		})
	}
}

// TestPostgresHistoryAPI: changes through the API are recorded with their
// actor and values, and past revisions can be read back.
func TestPostgresHistoryAPI(t *testing.T) {
	e, _ := newPGEnv(t)
	e.must(e.do("PUT", "/rules/a", `{"limit": 1, "window": "1m"}`, ActorHeader, "alice"), 201)                  // 1
	e.must(e.do("PUT", "/rules/a", `{"limit": 2, "window": "1m"}`, ActorHeader, "bob", "If-Match", `"1"`), 200) // 2
	e.must(e.do("PUT", "/clients/user:carol", `{"plan": "pro"}`), 201)                                          // 3
	e.must(e.do("DELETE", "/rules/a", "", ActorHeader, "alice"), 200)                                           // 4

	var h struct {
		ID      string `json:"id"`
		History []struct {
			Revision int64           `json:"revision"`
			Time     time.Time       `json:"time"`
			Actor    string          `json:"actor"`
			Op       string          `json:"op"`
			Before   json.RawMessage `json:"before"`
			After    json.RawMessage `json:"after"`
		} `json:"history"`
	}
	r := e.must(e.do("GET", "/rules/a/history", ""), 200)
	if err := json.Unmarshal(r.body, &h); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		rev           int64
		actor, op     string
		before, after string
	}{
		{4, "alice (192.0.2.1)", "delete", `{"id":"a","match":{},"limit":2,"window":"1m","algorithm":"token_bucket"}`, ""},
		{2, "bob (192.0.2.1)", "update", `{"id":"a","match":{},"limit":1,"window":"1m","algorithm":"token_bucket"}`,
			`{"id":"a","match":{},"limit":2,"window":"1m","algorithm":"token_bucket"}`},
		{1, "alice (192.0.2.1)", "create", "", `{"id":"a","match":{},"limit":1,"window":"1m","algorithm":"token_bucket"}`},
	}
	if h.ID != "a" || len(h.History) != len(want) {
		t.Fatalf("GET /rules/a/history = %s, want %d entries", r.body, len(want))
	}
	for i, w := range want {
		g := h.History[i]
		if g.Revision != w.rev || g.Actor != w.actor || g.Op != w.op || string(g.Before) != w.before || string(g.After) != w.after ||
			time.Since(g.Time) > time.Hour {
			t.Errorf("history[%d] = %+v (before %s, after %s), want %+v", i, g, g.Before, g.After, w)
		}
	}
	r = e.must(e.do("GET", "/rules/a/history?limit=1&before=4", ""), 200)
	if err := json.Unmarshal(r.body, &h); err != nil || len(h.History) != 1 || h.History[0].Revision != 2 {
		t.Errorf("GET /rules/a/history?limit=1&before=4 = %s, want revision 2 only", r.body)
	}
	e.must(e.do("GET", "/rules/nope/history", ""), 404)
	e.must(e.do("GET", "/rules/a/history?limit=0", ""), 400)

	r = e.must(e.do("GET", "/history?kind=client", ""), 200)
	if got := string(r.body); !strings.Contains(got, `"kind":"client","id":"user:carol","op":"create"`) || !strings.Contains(got, `"actor":"admin-api (192.0.2.1)"`) {
		t.Errorf("GET /history?kind=client = %s, want carol's create by admin-api", got)
	}
	e.must(e.do("GET", "/history?kind=rules", ""), 400)
	e.must(e.do("GET", "/history?id=a", ""), 400)

	for _, tc := range []struct {
		query  string
		status int
		want   string
	}{
		{"revision=1", 200, `"limit":1`},
		{"revision=2", 200, `"limit":2`},
		{"revision=4", 200, `"rules":[]`},
		{"revision=0", 200, `{"revision":0,"default_plan":"","rules":[]}`},
		{"revision=5", 404, "revision 5 does not exist; the current revision is 4"},
		{"revision=x", 400, "revision: want a revision number"},
	} {
		r := e.do("GET", "/rules?"+tc.query, "")
		if r.status != tc.status || !strings.Contains(string(r.body), tc.want) {
			t.Errorf("GET /rules?%s = %d %s, want %d with %s", tc.query, r.status, r.body, tc.status, tc.want)
		}
	}
	r = e.must(e.do("GET", "/clients?revision=2", ""), 200)
	if got := string(r.body); !strings.Contains(got, `"clients":{}`) {
		t.Errorf("GET /clients?revision=2 = %s, want no clients yet", got)
	}
}

// TestPostgresIfMatchRace: two PUTs with the same If-Match through two
// instances (two stores on one database): exactly one wins, the other is
// answered 412, round after round.
func TestPostgresIfMatchRace(t *testing.T) {
	e, url := newPGEnv(t)
	other := &env{t: t, h: New(pgStore(t, url), Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}), hdr: http.Header{}}
	etag := `"0"`
	for round := range 10 {
		var wg sync.WaitGroup
		rs := make([]resp, 2)
		for i, en := range []*env{e, other} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// A limit not stored yet: an unchanged PUT would store
				// nothing and so win alongside.
				rs[i] = en.do("PUT", "/rules/r", `{"limit": `+strconv.Itoa(2*round+i+1)+`, "window": "1m"}`, "If-Match", etag)
			}()
		}
		wg.Wait()
		ok, conflict := 0, 0
		for _, r := range rs {
			switch r.status {
			case 200, 201:
				ok++
				etag = r.header.Get("ETag") // the stores run no refresh: the winner's answer is the head
			case 412:
				conflict++
			}
		}
		if ok != 1 || conflict != 1 {
			t.Fatalf("round %d: statuses %d, %d with If-Match %s, want one 2xx and one 412", round, rs[0].status, rs[1].status, etag)
		}
	}
}

// TestNamedTokens: with --admin-token "alice:s1, bob:s2, plain", each whole
// entry is a bearer token; a named one records its changes under its name,
// whatever X-Sluice-Actor says, and the unnamed one leaves the actor to the
// header.
func TestNamedTokens(t *testing.T) {
	url := pgtest.NewDatabase(t)
	e := &env{t: t, h: New(pgStore(t, url), Config{Token: "alice:s1, bob:s2,plain",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}), hdr: http.Header{}}
	for _, auth := range []string{"Bearer s1", "Bearer alice", "Bearer alice:s2", "Bearer alice:s1,bob:s2", ""} {
		if r := e.do("GET", "/rules", "", "Authorization", auth); r.status != 401 {
			t.Errorf("GET /rules with %q = %d, want 401", auth, r.status)
		}
	}
	e.must(e.do("PUT", "/rules/a", `{"limit": 1, "window": "1m"}`, "Authorization", "Bearer alice:s1"), 201)
	e.must(e.do("PUT", "/rules/a", `{"limit": 2, "window": "1m"}`, "Authorization", "Bearer bob:s2", ActorHeader, "mallory"), 200)
	e.must(e.do("PUT", "/rules/a", `{"limit": 3, "window": "1m"}`, "Authorization", "Bearer plain", ActorHeader, "carol"), 200)
	e.must(e.do("PUT", "/rules/a", `{"limit": 4, "window": "1m"}`, "Authorization", "bearer plain"), 200)

	var h struct {
		History []struct {
			Revision int64  `json:"revision"`
			Actor    string `json:"actor"`
		} `json:"history"`
	}
	r := e.must(e.do("GET", "/rules/a/history", "", "Authorization", "Bearer plain"), 200)
	if err := json.Unmarshal(r.body, &h); err != nil {
		t.Fatal(err)
	}
	want := []string{"admin-api (192.0.2.1)", "carol (192.0.2.1)", "bob (192.0.2.1)", "alice (192.0.2.1)"}
	if len(h.History) != len(want) {
		t.Fatalf("history = %s, want %d entries", r.body, len(want))
	}
	for i, w := range want {
		if h.History[i].Actor != w {
			t.Errorf("history[%d] (revision %d) actor = %q, want %q", i, h.History[i].Revision, h.History[i].Actor, w)
		}
	}
}

func TestParseTokens(t *testing.T) {
	for _, tt := range []struct {
		in    string
		n     int
		names []string
	}{
		{"", 0, nil},
		{"s3cret", 1, []string{""}},
		{"alice:s1", 1, []string{"alice"}},
		{"ci-bot:a:b, bob:s2", 2, []string{"ci-bot", "bob"}},   // the name ends at the first colon
		{" alice:s1 ,\tbob:s2\n", 2, []string{"alice", "bob"}}, // spaces around the commas are not part of a token
	} { // malformed values: TestBlankTokenIsNoToken
		got := ParseTokens(tt.in)
		if got.Set() != (tt.n > 0) || got.Err() != nil {
			t.Errorf("ParseTokens(%q): Set %v, Err %v; want %d tokens", tt.in, got.Set(), got.Err(), tt.n)
			continue
		}
		entries := strings.Split(tt.in, ",")
		for i, name := range tt.names {
			r := httptest.NewRequest("GET", "/", nil)
			r.Header.Set("Authorization", "Bearer "+strings.TrimSpace(entries[i]))
			if n, ok := got.Check(r); !ok || n != name {
				t.Errorf("ParseTokens(%q): token %d checks as %q, %v; want %q, true", tt.in, i, n, ok, name)
			}
		}
	}
}
