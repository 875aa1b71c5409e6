package rulestore

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/seam/rulewire"
	"github.com/sluicehq/sluice/rules"
)

// migrationFiles are the schema's versions, NNNN_name.sql, applied in
// order. A released file is never edited: a change of schema is a new file.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrationLockKey is the advisory lock (pg_advisory_xact_lock) held while
// migrating, so that instances starting at once migrate one at a time:
// 0x736c75696365 is "sluice".
const migrationLockKey int64 = 0x736c75696365

type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the embedded migrations in version order.
func migrations() ([]migration, error) {
	ents, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range ents {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 || !strings.HasSuffix(e.Name(), ".sql") {
			return nil, fmt.Errorf("rulestore: migration file %s: want NNNN_name.sql", e.Name())
		}
		b, err := fs.ReadFile(migrationFiles, path.Join("migrations", e.Name()))
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(b)})
	}
	slices.SortFunc(ms, func(a, b migration) int { return a.version - b.version })
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("rulestore: migration %s: want version %d", m.name, i+1)
		}
	}
	return ms, nil
}

// SchemaVersion is the version of the newest schema this sluice knows.
func SchemaVersion() int {
	ms, err := migrations()
	if err != nil {
		return 0
	}
	return len(ms)
}

// migrate brings the schema to the newest version, in one transaction
// under migrationLockKey: instances that start at once wait for each other,
// and the later ones find nothing to do. A database whose schema is newer
// than this sluice knows (a newer release migrated it) is used as it is.
// It returns the migrations applied.
func migrate(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	ms, err := migrations()
	if err != nil {
		return nil, err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer rollback(tx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLockKey); err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS sluice_schema_migrations (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, `SELECT version FROM sluice_schema_migrations`)
	if err != nil {
		return nil, err
	}
	applied, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, err
	}
	var done []string
	for _, m := range ms {
		if slices.Contains(applied, int32(m.version)) {
			continue
		}
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return nil, fmt.Errorf("migration %s: %w", m.name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO sluice_schema_migrations (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
			return nil, err
		}
		done = append(done, m.name)
	}
	return done, tx.Commit(ctx)
}

// migrateLocked migrates the schema once per store. p.mu must be held.
func (p *Postgres) migrateLocked(ctx context.Context) error {
	if p.migrated.Load() {
		return nil
	}
	done, err := migrate(ctx, p.pool)
	if err != nil {
		return err
	}
	if len(done) > 0 {
		p.log.Info("rulestore: migrated the rules database", "database", p.loc, "applied", strings.Join(done, ", "))
	}
	p.migrated.Store(true)
	return nil
}

// ensureMigrated is migrateLocked for callers that do not hold p.mu.
func (p *Postgres) ensureMigrated(ctx context.Context) error {
	if p.migrated.Load() {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.migrateLocked(ctx)
}

// badDataError is a database row that does not decode or a set that does
// not compile: unlike an outage, retrying will not help until someone
// fixes the row.
type badDataError struct{ err error }

func (e badDataError) Error() string { return e.err.Error() }
func (e badDataError) Unwrap() error { return e.err }

func isBadData(err error) bool {
	var be badDataError
	return errors.As(err, &be)
}

// queryRower is what loadSet reads with: the pool, or a transaction.
type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// loadSQL reads the whole rule set in one statement, and so from one
// snapshot, in one round trip: the head, the database's identity, the
// rules in order as [id, body] pairs, and the clients as [id, plan] pairs.
const loadSQL = `SELECT s.revision, s.default_plan, (SELECT d.id::text FROM sluice_database d),
	COALESCE((SELECT json_agg(json_build_array(r.id, r.body) ORDER BY r.position, r.id) FROM sluice_rules r), '[]'),
	COALESCE((SELECT json_agg(json_build_array(c.id, c.plan)) FROM sluice_clients c), '[]')
	FROM sluice_state s`

// headSQL reads the head and the database's identity: the refresh's
// one small query, and an Update's lock (with FOR UPDATE OF s).
const headSQL = `SELECT s.revision, d.id::text FROM sluice_state s CROSS JOIN sluice_database d`

// loadSet reads the rule set the database holds and the database's
// identity. Rows that do not decode are a badDataError. The set is not
// compiled.
func loadSet(ctx context.Context, q queryRower) (*rules.Set, string, error) {
	s := &rules.Set{}
	var id *string
	var rulesJSON, clientsJSON []byte
	if err := q.QueryRow(ctx, loadSQL).Scan(&s.Revision, &s.DefaultPlan, &id, &rulesJSON, &clientsJSON); err != nil {
		return nil, "", err
	}
	if id == nil {
		return nil, "", badDataError{errors.New("sluice_database has no row: the database has no identity")}
	}
	set, err := decodeSet(s, rulesJSON, clientsJSON)
	return set, *id, err
}

// decodeSet fills s with the rules and clients loadSQL read.
func decodeSet(s *rules.Set, rulesJSON, clientsJSON []byte) (*rules.Set, error) {
	var rs [][2]json.RawMessage
	if err := json.Unmarshal(rulesJSON, &rs); err != nil {
		return nil, badDataError{fmt.Errorf("sluice_rules: %w", err)}
	}
	for _, pair := range rs {
		var id string
		json.Unmarshal(pair[0], &id) // a text column: always a JSON string
		var r rules.Rule
		err := rulewire.DecodeRuleJSON(pair[1], &r)
		if err != nil {
			return nil, badDataError{fmt.Errorf("sluice_rules row %q: %w", id, err)}
		}
		if r.ID != id {
			return nil, badDataError{fmt.Errorf("sluice_rules row %q: its body has the id %q", id, r.ID)}
		}
		s.Rules = append(s.Rules, r)
	}
	var cs [][2]string
	if err := json.Unmarshal(clientsJSON, &cs); err != nil {
		return nil, badDataError{fmt.Errorf("sluice_clients: %w", err)}
	}
	for _, pair := range cs {
		if s.Clients == nil {
			s.Clients = make(map[string]rules.Client, len(cs))
		}
		s.Clients[pair[0]] = rules.Client{Plan: pair[1]}
	}
	return s, nil
}

// ruleJSON is how a rule is stored: the admin API's JSON form.
func ruleJSON(r *rules.Rule) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("rulestore: encode rule %q: %w", r.ID, err)
	}
	return b, nil
}

// changeBatch returns the statements that turn the stored set old into
// next (whose Revision is the new one): the revision row, the changed
// rules, clients and default plan with one history row each, the head, and
// the notification. Rules are compared by their stored JSON; a rule that
// only moved gets a new position and no history row.
func changeBatch(old, next *rules.Set, actor string) (*pgx.Batch, error) {
	rev := next.Revision
	order := make([]string, len(next.Rules))
	for i := range next.Rules {
		order[i] = next.Rules[i].ID
	}
	c := &change{b: &pgx.Batch{}, rev: rev}
	c.b.Queue(`INSERT INTO sluice_revisions (revision, actor, default_plan, rule_order) VALUES ($1, $2, $3, $4)`,
		rev, actor, next.DefaultPlan, order)
	if err := c.rules(old.Rules, next.Rules); err != nil {
		return nil, err
	}
	c.clients(old.Clients, next.Clients)
	if old.DefaultPlan != next.DefaultPlan {
		before, _ := json.Marshal(old.DefaultPlan)
		after, _ := json.Marshal(next.DefaultPlan)
		c.history(KindDefaultPlan, "", OpUpdate, before, after)
	}
	c.b.Queue(`UPDATE sluice_state SET revision = $1, default_plan = $2, updated_at = now()`, rev, next.DefaultPlan)
	c.b.Queue(`SELECT pg_notify($1, $2)`, NotifyChannel, strconv.FormatInt(rev, 10))
	return c.b, nil
}

// change is the batch changeBatch builds: the statements of revision rev,
// and the number of history rows queued so far.
type change struct {
	b   *pgx.Batch
	rev int64
	seq int
}

// history queues the next history row of the revision.
func (c *change) history(kind, id, op string, before, after []byte) {
	c.b.Queue(`INSERT INTO sluice_history (revision, seq, kind, id, op, before, after) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		c.rev, c.seq, kind, id, op, jsonArg(before), jsonArg(after))
	c.seq++
}

// rules queues the rules that were created, changed, moved or deleted,
// in next's order, then the deleted ones in old's.
func (c *change) rules(old, next []rules.Rule) error {
	type stored struct {
		pos  int
		body []byte
	}
	was := make(map[string]stored, len(old))
	for i := range old {
		body, err := ruleJSON(&old[i])
		if err != nil {
			return err
		}
		was[old[i].ID] = stored{i, body}
	}
	kept := make(map[string]bool, len(next))
	for i := range next {
		r := &next[i]
		kept[r.ID] = true
		body, err := ruleJSON(r)
		if err != nil {
			return err
		}
		o, ok := was[r.ID]
		switch {
		case !ok:
			c.b.Queue(`INSERT INTO sluice_rules (id, position, body) VALUES ($1, $2, $3)`, r.ID, i, body)
			c.history(KindRule, r.ID, OpCreate, nil, body)
		case !bytes.Equal(o.body, body):
			c.b.Queue(`UPDATE sluice_rules SET position = $2, body = $3 WHERE id = $1`, r.ID, i, body)
			c.history(KindRule, r.ID, OpUpdate, o.body, body)
		case o.pos != i:
			c.b.Queue(`UPDATE sluice_rules SET position = $2 WHERE id = $1`, r.ID, i)
		}
	}
	for i := range old {
		id := old[i].ID
		if !kept[id] {
			c.b.Queue(`DELETE FROM sluice_rules WHERE id = $1`, id)
			c.history(KindRule, id, OpDelete, was[id].body, nil)
		}
	}
	return nil
}

// clients queues the clients that were created, deleted or changed, in
// the order of their ids.
func (c *change) clients(old, next map[string]rules.Client) {
	ids := make([]string, 0, len(old)+len(next))
	for id := range old {
		ids = append(ids, id)
	}
	for id := range next {
		if _, ok := old[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	clientJSON := func(cl rules.Client) []byte {
		b, _ := json.Marshal(cl) // a struct of one string: cannot fail
		return b
	}
	for _, id := range ids {
		oc, inOld := old[id]
		nc, inNext := next[id]
		switch {
		case !inOld:
			c.b.Queue(`INSERT INTO sluice_clients (id, plan) VALUES ($1, $2)`, id, nc.Plan)
			c.history(KindClient, id, OpCreate, nil, clientJSON(nc))
		case !inNext:
			c.b.Queue(`DELETE FROM sluice_clients WHERE id = $1`, id)
			c.history(KindClient, id, OpDelete, clientJSON(oc), nil)
		case oc != nc:
			c.b.Queue(`UPDATE sluice_clients SET plan = $2 WHERE id = $1`, id, nc.Plan)
			c.history(KindClient, id, OpUpdate, clientJSON(oc), clientJSON(nc))
		}
	}
}

// jsonArg is a JSON value as a query argument: nil (SQL NULL) when absent.
func jsonArg(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}

// snapshotHeader opens the snapshot file. Its second line names the
// database the rules come from (snapshotIDPrefix and its identity), read
// back by readSnapshot.
const snapshotHeader = `# sluice rules snapshot
` + snapshotIDPrefix + `%s
# database: %s, revision %d
#
# The last rules this instance took from its rules database, rewritten
# whenever they change (never with an older revision or another database's
# rules). sluice serve --rules-snapshot reads it at start: it serves these
# rules while the database is unreachable, and keeps serving them when the
# database is another one or went back to an older revision. To put these
# rules into a new database: sluice rules restore --from-snapshot FILE.
# Do not edit it: change the rules through the admin API or
# 'sluice rules apply -f'. It is a valid rules file.
`

// snapshotIDPrefix starts the snapshot line that names the database.
const snapshotIDPrefix = "# database-id: "

// writeSnapshot writes set, the rules of database id, to the snapshot file
// atomically.
func (p *Postgres) writeSnapshot(set *rules.Set, id string) error {
	if set == nil {
		set = &rules.Set{}
	}
	body, err := rules.EncodeYAML(set)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, snapshotHeader, id, p.loc, set.Revision)
	b.WriteByte('\n')
	b.Write(body)
	return writeAtomic(p.snapshot, b.Bytes(), holdsKeys(set))
}

// readSnapshot reads and compiles a snapshot file and returns its rules
// and the identity of the database they come from ("" for a snapshot
// written before databases had one).
func readSnapshot(path string) (*rules.Index, string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	ix, err := compileFile(data, -1)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	id := ""
	for line := range strings.Lines(string(data)) {
		if !strings.HasPrefix(line, "#") {
			break
		}
		if v, ok := strings.CutPrefix(line, snapshotIDPrefix); ok {
			id = strings.TrimSpace(v)
			break
		}
	}
	return ix, id, nil
}
