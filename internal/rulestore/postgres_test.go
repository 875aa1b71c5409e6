package rulestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/testkit/pgtest"
	"github.com/sluicehq/sluice/rules"
)

// pgFixture opens Postgres stores on one database with a fake refresh
// ticker and a log buffer.
type pgFixture struct {
	url  string
	logs *logBuf
	tick chan time.Time
	cfg  PostgresConfig
}

func newPGFixture(t *testing.T, url string) *pgFixture {
	t.Helper()
	fx := &pgFixture{url: url, logs: &logBuf{}, tick: make(chan time.Time)}
	fx.cfg = PostgresConfig{
		URL:    url,
		Logger: slog.New(slog.NewTextHandler(fx.logs, nil)),
		Tick:   func(time.Duration) (<-chan time.Time, func()) { return fx.tick, func() {} },
		// The listener retries quickly rather than sleep through a test.
		After:          func(time.Duration) <-chan time.Time { return time.After(20 * time.Millisecond) },
		ConnectTimeout: 2 * time.Second,
	}
	return fx
}

func (fx *pgFixture) open(t *testing.T) *Postgres {
	t.Helper()
	p, err := OpenPostgres(context.Background(), fx.cfg)
	if err != nil {
		t.Fatalf("OpenPostgres: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// run runs p.Run until the test ends.
func run(t *testing.T, p *Postgres) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// query returns one value of a query on the database url names.
func query[T any](t *testing.T, url, sql string, args ...any) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var v T
	if err := conn.QueryRow(ctx, sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// recordSets returns a step that applies a change through p and records
// the YAML of the set at the revision it makes in sets.
func recordSets(t *testing.T, ctx context.Context, p *Postgres, sets map[int64]string) func(func(*rules.Set) error) {
	return func(fn func(*rules.Set) error) {
		t.Helper()
		ix, err := p.Update(ctx, -1, fn)
		if err != nil {
			t.Fatal(err)
		}
		sets[ix.Revision()] = yamlOf(t, ix.Set())
	}
}

// yamlOf renders a set for comparisons (nil and empty compare equal).
func yamlOf(t *testing.T, s *rules.Set) string {
	t.Helper()
	if s == nil {
		s = &rules.Set{}
	}
	b, err := rules.EncodeYAML(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestIsPostgresURL(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"postgres://db/sluice", true},
		{"postgresql://u:p@db:5432/sluice?sslmode=require", true},
		{"POSTGRES://db/x", true},
		{"sluice-rules.yaml", false},
		{"/etc/sluice/postgres.yaml", false},
		{"", false},
	} {
		if got := IsPostgresURL(tc.in); got != tc.want {
			t.Errorf("IsPostgresURL(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestPostgresConfigValidate(t *testing.T) {
	d := DefaultPostgresConfig()
	for _, tc := range []struct {
		name string
		cfg  PostgresConfig
		want string // substring of the error; "" = valid
	}{
		{"ok", PostgresConfig{URL: "postgres://db/x"}, ""},
		{"no url", PostgresConfig{}, "a database URL is required"},
		{"refresh", PostgresConfig{URL: "postgres://db/x", RefreshInterval: -1},
			fmt.Sprintf("rulestore: postgres: refresh interval must be ≥ 0 (0 = default %s), got -1ns", d.RefreshInterval)},
		{"connect", PostgresConfig{URL: "postgres://db/x", ConnectTimeout: -1},
			fmt.Sprintf("rulestore: postgres: connect timeout must be ≥ 0 (0 = default %s), got -1ns", d.ConnectTimeout)},
		{"write", PostgresConfig{URL: "postgres://db/x", WriteTimeout: -1},
			fmt.Sprintf("rulestore: postgres: write timeout must be ≥ 0 (0 = default %s), got -1ns", d.WriteTimeout)},
		{"conns", PostgresConfig{URL: "postgres://db/x", MaxConns: -1},
			fmt.Sprintf("rulestore: postgres: max conns must be ≥ 0 (0 = default %d), got -1", d.MaxConns)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestPostgresBadURL(t *testing.T) {
	_, err := OpenPostgres(context.Background(), PostgresConfig{URL: "postgres://u:s3cret@db:notaport/x"})
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("OpenPostgres(bad URL) = %v, want an error without the password", err)
	}
}

// TestPostgresMigrateConcurrent: five stores opened at once on a fresh
// database all succeed, the schema is made once, and opening again
// changes nothing.
func TestPostgresMigrateConcurrent(t *testing.T) {
	url := pgtest.NewDatabase(t)
	fx := newPGFixture(t, url)
	const n = 5
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := OpenPostgres(context.Background(), fx.cfg)
			errs[i] = err
			if err == nil {
				p.Close()
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("store %d: OpenPostgres = %v", i, err)
		}
	}
	if got, want := query[int64](t, url, `SELECT count(*) FROM sluice_schema_migrations`), int64(SchemaVersion()); got != want {
		t.Errorf("sluice_schema_migrations has %d rows, want %d", got, want)
	}
	if got := fx.logs.count("migrated the rules database"); got != 1 {
		t.Errorf("%d stores logged a migration, want 1:\n%s", got, fx.logs)
	}
	p := fx.open(t)
	if got := p.Current().Revision(); got != 0 {
		t.Errorf("revision of a fresh database = %d, want 0", got)
	}
	if st := p.Status(); st.Kind != "postgres" || st.Error != "" || !strings.HasPrefix(st.Location, "postgres://postgres@127.0.0.1:") {
		t.Errorf("Status() = %+v, want kind postgres, no error, a location without password", st)
	}
	if got := fx.logs.count("migrated the rules database"); got != 1 {
		t.Errorf("reopening migrated again:\n%s", fx.logs)
	}
}

// TestPostgresHistory: every change is stored with its revision, actor and
// old and new values; SetAt rebuilds every revision exactly.
func TestPostgresHistory(t *testing.T) {
	url := pgtest.NewDatabase(t)
	fx := newPGFixture(t, url)
	p := fx.open(t)
	ctx := WithActor(context.Background(), "alice")
	sets := map[int64]string{0: yamlOf(t, p.Current().Set())}
	step := recordSets(t, ctx, p, sets)
	step(addRule(rule("a", 10)))    // 1
	step(addRule(rule("b", 20)))    // 2
	step(func(s *rules.Set) error { // 3: change a, move b first
		s.Rules[0].Limit = 11
		s.Rules[0], s.Rules[1] = s.Rules[1], s.Rules[0]
		return nil
	})
	step(func(s *rules.Set) error { // 4: a client and the default plan
		s.Clients = map[string]rules.Client{"user:bob": {Plan: "pro"}}
		s.DefaultPlan = "free"
		return nil
	})
	step(func(s *rules.Set) error { // 5: delete a, change bob
		s.Rules = s.Rules[:1]
		s.Clients["user:bob"] = rules.Client{Plan: "partner"}
		return nil
	})
	if _, err := p.Update(WithActor(context.Background(), "carol"), 5, func(s *rules.Set) error { // 6
		delete(s.Clients, "user:bob")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sets[6] = yamlOf(t, p.Current().Set())

	for rev, want := range sets {
		got, err := p.SetAt(context.Background(), rev)
		if err != nil {
			t.Fatalf("SetAt(%d): %v", rev, err)
		}
		if got.Revision != rev || yamlOf(t, got) != want {
			t.Errorf("SetAt(%d) =\n%s\nwant\n%s", rev, yamlOf(t, got), want)
		}
	}
	if _, err := p.SetAt(context.Background(), 7); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "current revision is 6") {
		t.Errorf("SetAt(7) error = %v, want ErrNotFound naming the current revision", err)
	}

	type entry struct {
		rev           int64
		actor, op     string
		before, after string
	}
	for _, tc := range []struct {
		q    HistoryQuery
		want []entry
	}{
		{HistoryQuery{Kind: KindRule, ID: "a"}, []entry{
			{5, "alice", OpDelete, `{"id":"a","match":{},"limit":11,"window":"1m","algorithm":"token_bucket"}`, ""},
			{3, "alice", OpUpdate, `{"id":"a","match":{},"limit":10,"window":"1m","algorithm":"token_bucket"}`,
				`{"id":"a","match":{},"limit":11,"window":"1m","algorithm":"token_bucket"}`},
			{1, "alice", OpCreate, "", `{"id":"a","match":{},"limit":10,"window":"1m","algorithm":"token_bucket"}`},
		}},
		{HistoryQuery{Kind: KindRule, ID: "a", Limit: 1}, []entry{
			{5, "alice", OpDelete, `{"id":"a","match":{},"limit":11,"window":"1m","algorithm":"token_bucket"}`, ""},
		}},
		{HistoryQuery{Kind: KindRule, ID: "a", Before: 5}, []entry{
			{3, "alice", OpUpdate, `{"id":"a","match":{},"limit":10,"window":"1m","algorithm":"token_bucket"}`,
				`{"id":"a","match":{},"limit":11,"window":"1m","algorithm":"token_bucket"}`},
			{1, "alice", OpCreate, "", `{"id":"a","match":{},"limit":10,"window":"1m","algorithm":"token_bucket"}`},
		}},
		{HistoryQuery{Kind: KindClient, ID: "user:bob"}, []entry{
			{6, "carol", OpDelete, `{"plan":"partner"}`, ""},
			{5, "alice", OpUpdate, `{"plan":"pro"}`, `{"plan":"partner"}`},
			{4, "alice", OpCreate, "", `{"plan":"pro"}`},
		}},
		{HistoryQuery{Kind: KindDefaultPlan}, []entry{{4, "alice", OpUpdate, `""`, `"free"`}}},
		{HistoryQuery{Kind: KindRule, ID: "nope"}, nil},
	} {
		t.Run(fmt.Sprintf("%s/%s/%d/%d", tc.q.Kind, tc.q.ID, tc.q.Limit, tc.q.Before), func(t *testing.T) {
			got, err := p.History(context.Background(), tc.q)
			if err != nil {
				t.Fatal(err)
			}
			var ents []entry
			for _, c := range got {
				ents = append(ents, entry{c.Revision, c.Actor, c.Op, string(c.Before), string(c.After)})
				if c.Time.IsZero() || time.Since(c.Time) > time.Hour || c.Kind != tc.q.Kind {
					t.Errorf("entry %+v: want a recent time and kind %q", c, tc.q.Kind)
				}
			}
			if fmt.Sprint(ents) != fmt.Sprint(tc.want) {
				t.Errorf("History(%+v) =\n%v\nwant\n%v", tc.q, ents, tc.want)
			}
		})
	}
	all, err := p.History(context.Background(), HistoryQuery{})
	if err != nil || len(all) != 8 || all[0].Revision != 6 || all[len(all)-1].Revision != 1 {
		t.Errorf("History(all) = %d entries from %d, %v; want 8 newest first", len(all), all[0].Revision, err)
	}
	if _, err := p.History(context.Background(), HistoryQuery{Kind: "rules"}); err == nil {
		t.Error("History(kind rules) = nil error, want one naming the kinds")
	}
	// The move of b (revision 3) is no change of b's value: no history row.
	if got := query[int64](t, url, `SELECT count(*) FROM sluice_history WHERE id = 'b'`); got != 1 {
		t.Errorf("history rows of b = %d, want 1 (its create)", got)
	}
}

// TestPostgresUpdateBuildsOnHead: a store that has not seen a change made
// elsewhere neither undoes it nor passes an If-Match of the old revision.
func TestPostgresUpdateBuildsOnHead(t *testing.T) {
	fx := newPGFixture(t, pgtest.NewDatabase(t))
	a, b := fx.open(t), fx.open(t) // no Run: b hears of nothing
	if _, err := a.Update(context.Background(), 0, addRule(rule("from-a", 1))); err != nil {
		t.Fatal(err)
	}
	if got := b.Current().Revision(); got != 0 {
		t.Fatalf("b's revision = %d before any refresh, want 0", got)
	}
	_, err := b.Update(context.Background(), 0, addRule(rule("from-b", 1)))
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "the revision is 1, not 0") {
		t.Fatalf("b.Update(if 0) error = %v, want ErrConflict (the revision is 1, not 0)", err)
	}
	ix, err := b.Update(context.Background(), -1, addRule(rule("from-b", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if got := ruleIDs(ix); fmt.Sprint(got) != "[from-a from-b]" || ix.Revision() != 2 {
		t.Errorf("b.Update(-1) = revision %d rules %v, want 2 [from-a from-b]", ix.Revision(), got)
	}
}

// TestPostgresConcurrentIfMatch: many writers on two stores, all with
// If-Match of the same revision, round after round: exactly one wins each
// round, the others get ErrConflict.
func TestPostgresConcurrentIfMatch(t *testing.T) {
	fx := newPGFixture(t, pgtest.NewDatabase(t))
	stores := []*Postgres{fx.open(t), fx.open(t)}
	const rounds, writers = 10, 6
	for round := range rounds {
		head := int64(round)
		var won, lost atomic.Int64
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := stores[w%2].Update(context.Background(), head, addRule(rule(fmt.Sprintf("r%d-w%d", round, w), 1)))
				switch {
				case err == nil:
					won.Add(1)
				case errors.Is(err, ErrConflict):
					lost.Add(1)
				default:
					t.Errorf("round %d writer %d: %v", round, w, err)
				}
			}()
		}
		wg.Wait()
		if won.Load() != 1 || lost.Load() != writers-1 {
			t.Fatalf("round %d: %d won, %d conflicted; want 1 and %d", round, won.Load(), lost.Load(), writers-1)
		}
	}
	if got := query[int64](t, fx.url, `SELECT count(*) FROM sluice_rules`); got != rounds {
		t.Errorf("%d rules stored, want %d", got, rounds)
	}
}

// TestPostgresFailuresChangeNothing: a callback error, an invalid set and
// a database error in the middle of the transaction all leave the
// database and the rules in force as they were.
func TestPostgresFailuresChangeNothing(t *testing.T) {
	url := pgtest.NewDatabase(t)
	fx := newPGFixture(t, url)
	p := fx.open(t)
	if _, err := p.Update(context.Background(), -1, addRule(rule("keep", 5))); err != nil {
		t.Fatal(err)
	}
	// A trigger that fails the insert of one rule: the database refuses
	// part of a change after other parts of it were written.
	if err := pgtest.Exec(url, `CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'boom refused'; END $$;
		CREATE TRIGGER boom BEFORE INSERT ON sluice_rules FOR EACH ROW WHEN (NEW.id = 'boom') EXECUTE FUNCTION boom()`); err != nil {
		t.Fatal(err)
	}
	errFn := errors.New("callback says no")
	for _, tc := range []struct {
		name string
		fn   func(*rules.Set) error
		want error
	}{
		{"callback error", func(s *rules.Set) error { s.Rules = nil; return errFn }, errFn},
		{"invalid rule", func(s *rules.Set) error {
			s.Rules = append(s.Rules, rule("ok-1", 1), rule("bad", -1))
			return nil
		}, ErrInvalid},
		{"database refuses one row", func(s *rules.Set) error {
			s.Rules = append(s.Rules[:0], rule("x1", 1), rule("boom", 1), rule("x2", 1))
			s.Clients = map[string]rules.Client{"user:z": {Plan: "z"}}
			s.DefaultPlan = "other"
			return nil
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := p.Update(context.Background(), -1, tc.fn)
			if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("Update error = %v, want %v", err, tc.want)
			}
			if tc.want == nil && !strings.Contains(err.Error(), "boom refused") {
				t.Errorf("Update error = %v, want the database's", err)
			}
			if got := p.Current().Revision(); got != 1 {
				t.Errorf("revision in force = %d, want 1", got)
			}
			for sql, want := range map[string]int64{
				`SELECT revision FROM sluice_state`:                         1,
				`SELECT count(*) FROM sluice_rules`:                         1,
				`SELECT count(*) FROM sluice_clients`:                       0,
				`SELECT count(*) FROM sluice_revisions`:                     1,
				`SELECT count(*) FROM sluice_history`:                       1,
				`SELECT count(*) FROM sluice_state WHERE default_plan = ''`: 1,
			} {
				if got := query[int64](t, url, sql); got != want {
					t.Errorf("%s = %d, want %d", sql, got, want)
				}
			}
		})
	}
}

// TestPostgresPropagation: a change through one store is put in force by
// another through NOTIFY, and with notifications off by the next refresh.
func TestPostgresPropagation(t *testing.T) {
	url := pgtest.NewDatabase(t)
	t.Run("notify", func(t *testing.T) {
		fx := newPGFixture(t, url)
		writer, reader := fx.open(t), fx.open(t)
		got := make(chan int64, 10)
		reader.Subscribe(func(ix *rules.Index) { got <- ix.Revision() })
		run(t, reader)
		waitListening(t, url)
		for i := range 3 {
			start := time.Now()
			ix, err := writer.Update(context.Background(), -1, addRule(rule(fmt.Sprintf("n%d", i), 1)))
			if err != nil {
				t.Fatal(err)
			}
			select {
			case rev := <-got:
				if rev != ix.Revision() {
					t.Fatalf("reader put revision %d in force, want %d", rev, ix.Revision())
				}
				t.Logf("revision %d in force on the other store after %s", rev, time.Since(start))
			case <-time.After(5 * time.Second):
				t.Fatalf("reader did not see revision %d within 5s (no refresh ticks were sent: only NOTIFY could)", ix.Revision())
			}
		}
		if got := reader.Current().Revision(); got != writer.Current().Revision() {
			t.Errorf("reader at %d, writer at %d", got, writer.Current().Revision())
		}
	})
	t.Run("refresh", func(t *testing.T) {
		fx := newPGFixture(t, url)
		fx.cfg.NoNotify = true
		writer, reader := fx.open(t), fx.open(t)
		got := make(chan int64, 10)
		reader.Subscribe(func(ix *rules.Index) { got <- ix.Revision() })
		run(t, reader)
		ix, err := writer.Update(context.Background(), -1, addRule(rule("r", 1)))
		if err != nil {
			t.Fatal(err)
		}
		select {
		case rev := <-got:
			t.Fatalf("reader put revision %d in force without a notification or tick", rev)
		default:
		}
		fx.tick <- time.Now() // Run is receiving: the refresh follows
		if rev := <-got; rev != ix.Revision() {
			t.Errorf("after a refresh tick the reader is at %d, want %d", rev, ix.Revision())
		}
		fx.tick <- time.Now() // nothing new: no reload, no subscriber call
		fx.tick <- time.Now()
		select {
		case rev := <-got:
			t.Errorf("an idle refresh put revision %d in force again", rev)
		default:
		}
	})
}

// waitListening waits until a session on the database url names LISTENs
// on NotifyChannel (pg_stat_activity shows LISTEN as the last query of
// the idle session).
func waitListening(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		n := query[int64](t, url, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query = $1`,
			"LISTEN "+NotifyChannel)
		if n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no session LISTENs on %s after 10s", NotifyChannel)
}

// TestPostgresOutage: with the database stopped, the rules in force stay,
// writes fail with ErrUnavailable at once, Status says why; after a
// restart the store recovers by itself, notifications included.
func TestPostgresOutage(t *testing.T) {
	srv := pgtest.StartServer(t)
	url := srv.NewDatabase(t)
	fx := newPGFixture(t, url)
	fx.cfg.SnapshotPath = filepath.Join(t.TempDir(), "snapshot.yaml")
	p := fx.open(t)
	writerFx := newPGFixture(t, url)
	writer := writerFx.open(t)
	got := make(chan int64, 10)
	p.Subscribe(func(ix *rules.Index) { got <- ix.Revision() })
	run(t, p)
	if _, err := p.Update(context.Background(), -1, addRule(rule("before", 7))); err != nil {
		t.Fatal(err)
	}
	<-got

	srv.Stop()
	start := time.Now()
	_, err := p.Update(context.Background(), -1, addRule(rule("during", 1)))
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "unreachable") || !strings.Contains(err.Error(), "revision 1") {
		t.Fatalf("Update with the database down = %v, want ErrUnavailable naming the revision in force", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Update with the database down took %s, want a prompt failure", d)
	}
	if got := ruleIDs(p.Current()); fmt.Sprint(got) != "[before]" {
		t.Errorf("rules in force during the outage = %v, want [before]", got)
	}
	fx.tick <- time.Now()
	fx.tick <- time.Now() // the first refresh has ended
	if st := p.Status(); !strings.Contains(st.Error, "unreachable") || st.ErrorAt.IsZero() || st.Revision != 1 {
		t.Errorf("Status() during the outage = %+v, want an unreachable error at revision 1", st)
	}
	if n := fx.logs.count("rules database unreachable"); n != 1 {
		t.Errorf("the outage was logged %d times, want once:\n%s", n, fx.logs)
	}

	srv.Start()
	fx.tick <- time.Now()
	fx.tick <- time.Now()
	if st := p.Status(); st.Error != "" {
		t.Errorf("Status() after the restart = %+v, want no error", st)
	}
	if !strings.Contains(fx.logs.String(), "reachable again") {
		t.Errorf("no recovery logged:\n%s", fx.logs)
	}
	// The listener reconnects by itself: a change made elsewhere arrives
	// without a refresh tick.
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(fx.logs.String(), "listening for rule changes again") {
		if time.Now().After(deadline) {
			t.Fatalf("listener not back after 20s:\n%s", fx.logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ix, err := writer.Update(context.Background(), -1, addRule(rule("after", 1)))
	if err != nil {
		t.Fatalf("Update after the restart: %v", err)
	}
	select {
	case rev := <-got:
		if rev != ix.Revision() {
			t.Errorf("after the restart the store put revision %d in force, want %d", rev, ix.Revision())
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the change after the restart did not arrive by NOTIFY within 5s:\n%s", fx.logs)
	}
	snap, err := os.ReadFile(fx.cfg.SnapshotPath)
	if err != nil || !strings.Contains(string(snap), "id: after") || !strings.Contains(string(snap), "revision: 2") {
		t.Errorf("snapshot = %q, %v; want revision 2 with rule after", snap, err)
	}
}

// TestPostgresStartFromSnapshot: with the database down, a store with a
// snapshot starts on the snapshot's rules and takes the database's once
// it is back; without a snapshot it does not start.
func TestPostgresStartFromSnapshot(t *testing.T) {
	srv := pgtest.StartServer(t)
	url := srv.NewDatabase(t)
	fx := newPGFixture(t, url)
	fx.cfg.SnapshotPath = filepath.Join(t.TempDir(), "snapshot.yaml")
	first := fx.open(t)
	for _, r := range []rules.Rule{rule("s1", 1), rule("s2", 2)} {
		if _, err := first.Update(context.Background(), -1, addRule(r)); err != nil {
			t.Fatal(err)
		}
	}
	first.Close()
	srv.Stop()

	noSnap := fx.cfg
	noSnap.SnapshotPath = ""
	if _, err := OpenPostgres(context.Background(), noSnap); err == nil || !strings.Contains(err.Error(), "unreachable") || !strings.Contains(err.Error(), "--rules-snapshot") {
		t.Errorf("OpenPostgres(database down, no snapshot) = %v, want an unreachable error that points at --rules-snapshot", err)
	}
	missing := fx.cfg
	missing.SnapshotPath = filepath.Join(t.TempDir(), "none.yaml")
	if _, err := OpenPostgres(context.Background(), missing); err == nil || !strings.Contains(err.Error(), "snapshot cannot stand in") {
		t.Errorf("OpenPostgres(database down, snapshot missing) = %v, want an error naming both", err)
	}

	p := fx.open(t)
	if got := ruleIDs(p.Current()); fmt.Sprint(got) != "[s1 s2]" || p.Current().Revision() != 2 {
		t.Fatalf("rules from the snapshot = %v at %d, want [s1 s2] at 2", got, p.Current().Revision())
	}
	if st := p.Status(); !strings.Contains(st.Error, "unreachable") {
		t.Errorf("Status() = %+v, want an unreachable error", st)
	}
	if _, err := p.Update(context.Background(), -1, addRule(rule("x", 1))); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Update while down = %v, want ErrUnavailable", err)
	}
	got := make(chan int64, 10)
	p.Subscribe(func(ix *rules.Index) { got <- ix.Revision() })
	run(t, p)

	srv.Start()
	if _, err := fx.open(t).Update(context.Background(), -1, addRule(rule("s3", 3))); err != nil {
		t.Fatal(err)
	}
	fx.tick <- time.Now()
	for rev := int64(0); rev != 3; {
		select {
		case rev = <-got: // 2 first when the listener's refresh comes before the write
		case <-time.After(10 * time.Second):
			t.Fatalf("the store did not take the database's rules (revision 3) after it came back:\n%s", fx.logs)
		}
	}
	// Subscribers hear of the new rules before the outcome is noted in
	// Status: give it a moment.
	for start := time.Now(); ; {
		st := p.Status()
		if st.Error == "" && st.Revision == 3 {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("Status() = %+v, want revision 3 without error", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := p.Update(context.Background(), 3, addRule(rule("s4", 4))); err != nil {
		t.Errorf("Update after recovery: %v", err)
	}
}

// TestPostgresBadRows: rules in the database that do not load (a hand edit)
// are refused: the last good rules stay, Status and Update say why.
func TestPostgresBadRows(t *testing.T) {
	url := pgtest.NewDatabase(t)
	fx := newPGFixture(t, url)
	p := fx.open(t)
	if _, err := p.Update(context.Background(), -1, addRule(rule("good", 5))); err != nil {
		t.Fatal(err)
	}
	run(t, p)
	if err := pgtest.Exec(url, `UPDATE sluice_rules SET body = jsonb_set(body, '{limit}', '-1'); UPDATE sluice_state SET revision = 2`); err != nil {
		t.Fatal(err)
	}
	fx.tick <- time.Now()
	fx.tick <- time.Now()
	st := p.Status()
	if !strings.Contains(st.Error, `sluice_rules row "good"`) || !strings.Contains(st.Error, "limit") || st.Revision != 1 {
		t.Errorf("Status() = %+v, want the bad row named and revision 1 kept", st)
	}
	if got := p.Current().Rules()[0].Limit; got != 5 {
		t.Errorf("limit in force = %d, want 5", got)
	}
	_, err := p.Update(context.Background(), -1, addRule(rule("more", 1)))
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "fix the rows") {
		t.Errorf("Update over bad rows = %v, want ErrUnavailable asking to fix them", err)
	}
}

func TestPostgresRunAndClose(t *testing.T) {
	fx := newPGFixture(t, pgtest.NewDatabase(t))
	p := fx.open(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	fx.tick <- time.Now()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run after cancel = %v, want context.Canceled", err)
	}
	go func() { done <- p.Run(context.Background()) }()
	fx.tick <- time.Now()
	p.Close()
	if err := <-done; err != nil {
		t.Errorf("Run after Close = %v, want nil", err)
	}
	if _, err := p.Update(context.Background(), -1, addRule(rule("b", 1))); !errors.Is(err, ErrClosed) {
		t.Errorf("Update after Close = %v, want ErrClosed", err)
	}
	if p.Current() == nil {
		t.Error("Current() after Close = nil")
	}
	canceled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if _, err := fx.open(t).Update(canceled, -1, addRule(rule("c", 1))); !errors.Is(err, context.Canceled) {
		t.Errorf("Update(canceled) = %v, want context.Canceled", err)
	}
}

// TestPostgresRuleJSONRoundTrip: every field of a rule survives the
// database.
func TestPostgresRuleJSONRoundTrip(t *testing.T) {
	fx := newPGFixture(t, pgtest.NewDatabase(t))
	p := fx.open(t)
	off := false
	full := rules.Rule{ID: "full", Description: `quotes " and <html> & ünïcode`, Match: rules.Match{Plan: "pro", Endpoint: "* /api/*"},
		By: rules.ByAPIKey, Limit: 100, Window: rules.Duration(90 * time.Second), Burst: 150,
		FailureMode: rules.FailClosed, Shadow: true, Enabled: &off}
	if _, err := p.Update(context.Background(), -1, addRule(full)); err != nil {
		t.Fatal(err)
	}
	again := fx.open(t)
	want, _ := json.Marshal(full)
	gotRule, _ := again.Current().Rule("full")
	got, _ := json.Marshal(gotRule.Rule)
	if string(got) != string(want) {
		t.Errorf("rule after the database =\n%s\nwant\n%s", got, want)
	}
	// Header and method-set matches too.
	hdr := rules.Rule{ID: "hdr", Match: rules.Match{Endpoint: "PUT|DELETE /api/*", Headers: map[string]string{"X-Tenant": "acme", "x-env": "prod-*"}},
		By: rules.ByGlobal, Limit: 5, Window: rules.Duration(time.Minute)}
	if _, err := p.Update(context.Background(), -1, addRule(hdr)); err != nil {
		t.Fatal(err)
	}
	gotRule, _ = fx.open(t).Current().Rule("hdr")
	if !reflect.DeepEqual(gotRule.Rule, hdr) {
		t.Errorf("rule after the database = %+v, want %+v", gotRule.Rule, hdr)
	}
}
