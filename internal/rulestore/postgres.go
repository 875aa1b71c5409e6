package rulestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/rules"
)

// NotifyChannel is the PostgreSQL channel every change is announced on
// (NOTIFY sluice_rules, '<revision>'), inside the transaction that makes it.
const NotifyChannel = "sluice_rules"

// PostgresConfig configures a Postgres store. Only URL is required:
// OpenPostgres fills every other zero field with its default (see
// DefaultPostgresConfig).
type PostgresConfig struct {
	// URL of the database, as libpq and pgx take it:
	// postgres://user:password@host:5432/database?sslmode=require (or a
	// postgresql:// URL, or "host=... dbname=..."). Required. The tables
	// (sluice_*) are made in the connection's search_path; set
	// ?search_path=... to keep them in their own schema.
	URL string
	// RefreshInterval is how often Run reads the database's revision and,
	// when it moved, loads the rules: the safety net under notifications,
	// and the only propagation with NoNotify. Default 5s. Each check is one
	// small query per instance.
	RefreshInterval time.Duration
	// NoNotify turns LISTEN/NOTIFY off. Default false: a change is in
	// force on every instance within about a second. Turn it off only
	// behind a connection pooler that cannot LISTEN (PgBouncer in
	// transaction mode); changes then wait for the refresh.
	NoNotify bool
	// SnapshotPath, when set, is a file the rules in force are written to
	// (atomically) whenever they change, with the identity of their
	// database, so that an instance can start — serving those rules —
	// while the database is unreachable, and, restarted on a database that
	// is another one or at a lower revision, serves them rather than take
	// that database's (see the type's doc). It is a valid rules file, never
	// rewritten with an older revision or another database's rules; one
	// that exists but does not load stops OpenPostgres. Default "": no
	// snapshot; the instance then cannot start without the database, and
	// takes whatever rules the database holds at start.
	SnapshotPath string
	// ConnectTimeout bounds each attempt to reach the database: at start
	// (before falling back on the snapshot), and each reconnection of the
	// notification listener. A connect_timeout in URL wins for
	// connections. Default 5s.
	ConnectTimeout time.Duration
	// WriteTimeout bounds how long an Update waits for the database before
	// it fails with ErrUnavailable. Default 10s.
	WriteTimeout time.Duration
	// MaxConns caps the connection pool (the listener has one more of its
	// own). Default 4: writes are rare and short.
	MaxConns int32
	// Logger receives loads, outages and recoveries. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock of Status times. Default time.Now. (History times
	// come from the database's clock.)
	Now func() time.Time
	// Tick makes the ticker Run refreshes on; see FileConfig.Tick. Default
	// time.NewTicker.
	Tick func(d time.Duration) (<-chan time.Time, func())
	// After makes the timer the listener waits on before it reconnects.
	// Default time.After.
	After func(d time.Duration) <-chan time.Time
}

// DefaultPostgresConfig returns the configuration OpenPostgres uses for
// zero fields.
func DefaultPostgresConfig() PostgresConfig {
	f := DefaultFileConfig()
	return PostgresConfig{
		RefreshInterval: 5 * time.Second,
		ConnectTimeout:  5 * time.Second,
		WriteTimeout:    10 * time.Second,
		MaxConns:        4,
		Logger:          f.Logger,
		Now:             f.Now,
		Tick:            f.Tick,
		After:           time.After,
	}
}

// Validate reports a configuration OpenPostgres cannot use.
func (c PostgresConfig) Validate() error {
	switch {
	case c.URL == "":
		return errors.New("rulestore: postgres: a database URL is required, e.g. postgres://sluice@db:5432/sluice")
	case c.RefreshInterval < 0:
		return fmt.Errorf("rulestore: postgres: refresh interval must be ≥ 0 (0 = default 5s), got %s", c.RefreshInterval)
	case c.ConnectTimeout < 0:
		return fmt.Errorf("rulestore: postgres: connect timeout must be ≥ 0 (0 = default 5s), got %s", c.ConnectTimeout)
	case c.WriteTimeout < 0:
		return fmt.Errorf("rulestore: postgres: write timeout must be ≥ 0 (0 = default 10s), got %s", c.WriteTimeout)
	case c.MaxConns < 0:
		return fmt.Errorf("rulestore: postgres: max conns must be ≥ 0 (0 = default 4), got %d", c.MaxConns)
	}
	return nil
}

func (c PostgresConfig) withDefaults() PostgresConfig {
	d := DefaultPostgresConfig()
	if c.RefreshInterval == 0 {
		c.RefreshInterval = d.RefreshInterval
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = d.ConnectTimeout
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = d.WriteTimeout
	}
	if c.MaxConns == 0 {
		c.MaxConns = d.MaxConns
	}
	if c.Logger == nil {
		c.Logger = d.Logger
	}
	if c.Now == nil {
		c.Now = d.Now
	}
	if c.Tick == nil {
		c.Tick = d.Tick
	}
	if c.After == nil {
		c.After = d.After
	}
	return c
}

// IsPostgresURL reports whether a --rules value names a PostgreSQL
// database (postgres:// or postgresql://) rather than a rules file.
func IsPostgresURL(s string) bool {
	l := strings.ToLower(s)
	return strings.HasPrefix(l, "postgres://") || strings.HasPrefix(l, "postgresql://")
}

// Postgres is a Source that keeps the rules, the client registry and the
// history of every change in a PostgreSQL database shared by a fleet of
// instances.
//
// Model: the database is the truth; each instance serves a compiled copy
// from memory (Current never touches the database). An Update is one
// transaction: it locks the single sluice_state row (SELECT ... FOR
// UPDATE), so writers on every instance are serialized and an If-Match
// revision is checked against the committed head; it writes the rows that
// changed, a sluice_revisions row (time, actor) and one sluice_history row
// per changed rule, client or default plan (old and new value), and
// NOTIFYs NotifyChannel with the new revision — all or nothing. Every
// instance LISTENs on a connection of its own and reloads when told;
// Run also checks the revision every RefreshInterval, which catches what a
// lost connection missed.
//
// While the database is unreachable, the last good rules stay in force,
// Status().Error says why, Updates fail with ErrUnavailable, and Run keeps
// trying (the pool reconnects on demand, the listener with backoff); the
// first successful refresh clears the error. Rules in the database that do
// not load (edited by hand) are refused the same way. With SnapshotPath,
// every set put in force is also written to a local file, which
// OpenPostgres serves when it cannot reach the database.
//
// Every database has an identity, a UUID made when sluice creates its
// tables (sluice_database), kept with the rules in force and written in
// the snapshot. An instance never takes rules from a database other than
// the one whose rules it serves, nor a revision lower than the one it
// serves: a database dropped and made again empty, or restored from an
// older backup, is refused. The instance keeps serving its rules,
// Status().Refused and Error say why and what to do, Updates and history
// reads fail with ErrUnavailable, and the snapshot is left alone, until
// the rules are restored into the database (RestoreSnapshot, `sluice rules
// restore`). A restore gives the database a new identity and records the
// ones it continues, with their revision (sluice_lineage); an instance
// that served one of them at that revision or before takes the restored
// database's rules.
//
// Schema changes are versioned migrations (migrations/*.sql), applied at
// open under an advisory lock, so many instances may start at once.
//
// A Postgres is safe for concurrent use. Create one with OpenPostgres.
type Postgres struct {
	pool     *pgxpool.Pool
	connCfg  *pgx.ConnConfig // for the listening connection
	loc      string          // the database, without password
	refresh  time.Duration
	notify   bool
	snapshot string
	connTO   time.Duration
	writeTO  time.Duration
	log      *slog.Logger
	now      func() time.Time
	tick     func(time.Duration) (<-chan time.Time, func())
	after    func(time.Duration) <-chan time.Time

	cur atomic.Pointer[inForce]

	// mu serializes loads from the database and putting rules in force,
	// and with them the subscriber calls. It guards the fields below.
	mu      sync.Mutex
	down    bool   // the database was unreachable at the last attempt
	badData string // what is wrong with the rules the database holds ("" when none)
	seen    head   // the database's head when it was last refused

	// refused is why the database is refused (nil when it is not): read
	// without p.mu by Update and the history reads, set under p.mu.
	refused atomic.Pointer[string]

	migrated atomic.Bool // the schema is current; set once, under mu

	subMu sync.Mutex
	subs  []func(*rules.Index)

	stMu sync.Mutex // guards st
	st   Status

	runMu     sync.Mutex // guards closed and wg.Add
	closed    bool
	wg        sync.WaitGroup // Run
	done      chan struct{}  // closed by Close
	closeOnce sync.Once
}

var (
	_ Source    = (*Postgres)(nil)
	_ Historian = (*Postgres)(nil)
)

// inForce is the rule set in force and where it came from.
type inForce struct {
	ix     *rules.Index
	fromDB bool   // loaded from or written to the database (not the snapshot)
	db     string // the identity of the database the rules come from ("" unknown: an old snapshot)
}

// OpenPostgres connects to the database cfg.URL names, creates or migrates
// its schema, and loads the rules. An empty database starts at revision 0
// with no rules. When the database cannot be reached within
// cfg.ConnectTimeout and cfg.SnapshotPath holds a snapshot, the snapshot's
// rules are served (Status().Error says the database is unreachable) until
// Run reaches the database; without a snapshot that is an error. A
// database that refuses the credentials, or holds rules that do not load,
// is an error either way.
func OpenPostgres(ctx context.Context, cfg PostgresConfig) (*Postgres, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		// pgx's message quotes the URL with the password redacted.
		return nil, fmt.Errorf("rulestore: postgres: %w", err)
	}
	pc.MaxConns = cfg.MaxConns
	// Ping every connection taken from the pool: after a restart of the
	// database its idle connections are dead, and the first write after an
	// outage must not fail on one. A round trip per (rare) use is cheap.
	pc.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return true }
	pc.PingTimeout = cfg.ConnectTimeout
	cc := pc.ConnConfig
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = cfg.ConnectTimeout
	}
	if cc.RuntimeParams["application_name"] == "" {
		cc.RuntimeParams["application_name"] = "sluice"
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc) // connects on demand
	if err != nil {
		return nil, fmt.Errorf("rulestore: postgres: %w", err)
	}
	p := &Postgres{
		pool:     pool,
		connCfg:  cc.Copy(),
		loc:      location(cc),
		refresh:  cfg.RefreshInterval,
		notify:   !cfg.NoNotify,
		snapshot: cfg.SnapshotPath,
		connTO:   cfg.ConnectTimeout,
		writeTO:  cfg.WriteTimeout,
		log:      cfg.Logger,
		now:      cfg.Now,
		tick:     cfg.Tick,
		after:    cfg.After,
		done:     make(chan struct{}),
	}
	p.st = Status{Kind: "postgres", Location: p.loc}

	// The snapshot, when there is one, says which database and revision
	// this instance served last: the database must be that one (or one it
	// was restored into) at that revision or later.
	var snap *rules.Index
	if p.snapshot != "" {
		ix, id, serr := readSnapshot(p.snapshot)
		switch {
		case serr == nil:
			snap = ix
			p.cur.Store(&inForce{ix: ix, db: id})
		case !errors.Is(serr, fs.ErrNotExist):
			pool.Close()
			return nil, fmt.Errorf("rulestore: the rules snapshot %s cannot be read, so this instance cannot tell whether the database holds its rules or older ones: %w "+
				"(fix the file, or remove it to take the database's rules as they are)", p.snapshot, serr)
		}
	}

	octx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	// Noted (and logged) only when the store is returned: an error that
	// stops the start is said once, by the error itself.
	p.mu.Lock()
	err = p.refreshLocked(octx, true)
	if err == nil || isRefused(err) || isUnavailable(err) && p.snapshot != "" && ctx.Err() == nil {
		p.noteLocked(err)
	}
	p.mu.Unlock()
	cancel()
	if err == nil {
		return p, nil
	}
	if isRefused(err) {
		p.mu.Lock()
		p.installLocked(snap, false, p.cur.Load().db)
		p.mu.Unlock()
		return p, nil // refreshNow logged why and what to do
	}
	if ctx.Err() != nil || !isUnavailable(err) || isMissingDatabase(err) || p.snapshot == "" {
		pool.Close()
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "3D000" { // invalid_catalog_name
			db := pool.Config().ConnConfig.Database
			return nil, fmt.Errorf("rulestore: the rules database %s: database %q does not exist: create it (CREATE DATABASE %s, owned by the role sluice connects as; sluice makes its tables), or fix the database name in --rules",
				p.loc, db, pgx.Identifier{db}.Sanitize())
		}
		if isUnavailable(err) && ctx.Err() == nil {
			return nil, fmt.Errorf("rulestore: the rules database %s is unreachable: %w "+
				"(with --rules-snapshot FILE an instance starts on the last rules it saw while the database is down)", p.loc, err)
		}
		return nil, fmt.Errorf("rulestore: the rules database %s: %w", p.loc, err)
	}
	if snap == nil {
		pool.Close()
		return nil, fmt.Errorf("rulestore: the rules database %s is unreachable (%w), and the snapshot cannot stand in: %w", p.loc, err,
			&fs.PathError{Op: "open", Path: p.snapshot, Err: fs.ErrNotExist})
	}
	p.mu.Lock()
	p.installLocked(snap, false, p.cur.Load().db)
	p.mu.Unlock()
	p.log.Warn("rulestore: rules database unreachable at start; serving the snapshot until it is back",
		"database", p.loc, "snapshot", p.snapshot, "revision", snap.Revision(), "error", err)
	return p, nil
}

// location is the database a connection config names, for logs and
// Status: postgres://user@host:port/database, never the password.
func location(cc *pgx.ConnConfig) string {
	u := url.URL{Scheme: "postgres", Host: net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))), Path: "/" + cc.Database}
	if strings.HasPrefix(cc.Host, "/") { // a Unix socket directory
		u.Host = ""
		u.RawQuery = "host=" + url.QueryEscape(cc.Host)
	}
	if cc.User != "" {
		u.User = url.User(cc.User)
	}
	return u.String()
}

// Current returns the rules in force.
func (p *Postgres) Current() *rules.Index { return p.cur.Load().ix }

// Status reports the database, the revision in force and, while the
// database is unreachable, holds rules that do not load, or is refused,
// why.
func (p *Postgres) Status() Status {
	p.stMu.Lock()
	defer p.stMu.Unlock()
	return p.st
}

// Subscribe registers fn to be called after every change; see Source.
func (p *Postgres) Subscribe(fn func(*rules.Index)) {
	p.subMu.Lock()
	p.subs = append(p.subs, fn)
	p.subMu.Unlock()
}

func (p *Postgres) isClosed() bool {
	p.runMu.Lock()
	defer p.runMu.Unlock()
	return p.closed
}

// Update changes the rule set in one transaction; see Source and the type's
// doc. It builds on the database's head, not on the rules in force, so a
// change made elsewhere and not yet seen here is never undone. The actor
// recorded is ActorFrom(ctx) ("unknown" when none). An unreachable database
// (or one slower than WriteTimeout) fails with ErrUnavailable; when that
// happens at the commit, the change may or may not have been stored, and
// the error says so.
func (p *Postgres) Update(ctx context.Context, ifRevision int64, fn func(*rules.Set) error) (*rules.Index, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if p.isClosed() {
		return nil, ErrClosed
	}
	actor := ActorFrom(ctx)
	if actor == "" {
		actor = "unknown"
	}
	wctx, cancel := context.WithTimeout(ctx, p.writeTO)
	defer cancel()
	ix, err := p.update(wctx, ifRevision, actor, fn)
	if errors.Is(err, errMoved) {
		// The database is not the one (or not at the revision) whose rules
		// are in force: judge it as a refresh does, then try once more.
		if rerr := p.refreshNow(wctx, true); rerr != nil && isRefused(rerr) {
			err = fmt.Errorf("%w: %w", ErrUnavailable, rerr)
		} else {
			ix, err = p.update(wctx, ifRevision, actor, fn)
			if errors.Is(err, errMoved) {
				err = fmt.Errorf("%w: the rules database %s changed during the write; nothing was stored, try again", ErrUnavailable, p.loc)
			}
		}
	}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, ErrConflict) {
			return nil, cerr
		}
		if errors.Is(err, ErrUnavailable) && !isRefused(err) && (isUnavailable(err) || isBadData(err)) {
			p.mu.Lock()
			p.noteLocked(err)
			p.mu.Unlock()
		}
		return nil, err
	}
	if isDryRun(ctx) {
		return ix, nil
	}
	p.mu.Lock()
	if cur := p.cur.Load(); ix.Revision() > cur.ix.Revision() && p.refused.Load() == nil {
		p.installLocked(ix, true, cur.db)
	}
	p.mu.Unlock()
	return ix, nil
}

// errMoved: update found the database at another identity, or at a
// revision lower than the one in force.
var errMoved = errors.New("rulestore: postgres: the database is not the one in force")

// update is Update's transaction.
func (p *Postgres) update(ctx context.Context, ifRevision int64, actor string, fn func(*rules.Set) error) (*rules.Index, error) {
	if err := p.ensureMigrated(ctx); err != nil {
		return nil, p.dbError("migrate the schema", err, false)
	}
	if why := p.refused.Load(); why != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, refusedError{*why})
	}
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return nil, p.dbError("begin", err, false)
	}
	defer rollback(tx)
	var h head
	if err := tx.QueryRow(ctx, headSQL+` FOR UPDATE OF s`).Scan(&h.revision, &h.id); err != nil {
		if isUndefinedTable(err) {
			return nil, errMoved // the tables are gone: the refresh says what that means
		}
		return nil, p.dbError("lock the revision", err, false)
	}
	cur := p.cur.Load()
	if h.id != cur.db || h.revision < cur.ix.Revision() {
		return nil, errMoved
	}
	if ifRevision >= 0 && ifRevision != h.revision {
		return nil, fmt.Errorf("%w: the revision is %d, not %d", ErrConflict, h.revision, ifRevision)
	}
	var old *rules.Set
	if cur.fromDB && cur.ix.Revision() == h.revision {
		old = cur.ix.Set()
	} else {
		if old, _, err = loadSet(ctx, tx); err != nil {
			if isBadData(err) {
				return nil, fmt.Errorf("%w: %w; fix the rows in the database before changing rules through the API", ErrUnavailable, err)
			}
			return nil, p.dbError("read the rules", err, false)
		}
	}
	if old == nil {
		old = &rules.Set{Revision: h.revision}
	}
	next := old.Clone()
	if err := fn(next); err != nil {
		return nil, err
	}
	if unchanged(old, next) {
		// Nothing to store: the head stays, and the rollback leaves no
		// revision, history row or notification. The head is returned
		// (and put in force, if this instance had not loaded it yet).
		if cur.fromDB && cur.ix.Revision() == h.revision {
			return cur.ix, nil
		}
		old.Revision = h.revision
		ix, err := rules.Compile(old)
		if err != nil {
			return nil, fmt.Errorf("%w: %w; fix the rows in the database before changing rules through the API", ErrUnavailable, badDataError{err})
		}
		return ix, nil
	}
	next.Revision = h.revision + 1
	ix, err := rules.Compile(next)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	b, err := changeBatch(old, ix.Set(), actor)
	if err != nil {
		return nil, err
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, p.dbError("write the change", err, false)
	}
	if isDryRun(ctx) {
		return ix, nil // the deferred rollback undoes it, notification included
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, p.dbError("commit", err, true)
	}
	return ix, nil
}

// rollback ends a transaction that was not committed (a no-op after
// Commit), even when the request's context is done.
func rollback(tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tx.Rollback(ctx)
}

// dbError describes a failed database step of an Update. It wraps
// ErrUnavailable and names the cause: the database is unreachable (worth a
// retry later), or it refused the step with an error of its own (e.g. the
// database does not exist, or a trigger refused the change), which the
// message quotes.
func (p *Postgres) dbError(step string, err error, atCommit bool) error {
	maybe := ""
	if atCommit {
		maybe = "; the change may or may not have been stored: GET /rules shows which"
	}
	what := "is unreachable"
	if !isUnavailable(err) {
		what = "refused the change"
	}
	return fmt.Errorf("%w: the rules database %s %s (%s: %w)%s; every instance keeps serving the rules in force (revision %d)",
		ErrUnavailable, p.loc, what, step, err, maybe, p.Current().Revision())
}

// isUnavailable tells an error of an unreachable, restarting or overloaded
// database (worth a retry later) from one the database answered for good.
func isUnavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"), // connection exception
			strings.HasPrefix(pe.Code, "53"),  // insufficient resources (too many connections)
			strings.HasPrefix(pe.Code, "57P"), // shutting down, cannot connect now
			pe.Code == "25006",                // read-only transaction: a standby after a failover
			pe.Code == "3D000",                // the database does not exist (dropped, not made again yet)
			pe.Code == "40001", pe.Code == "40P01":
			return true
		}
		return false
	}
	var be badDataError
	var re refusedError
	return !errors.As(err, &be) && !errors.As(err, &re) // dial, I/O, timeout, closed connection or pool
}

// refreshNow puts in force what the database holds when its revision is
// not the one in force. Unless force, it reads the revision first (one
// small query) and loads the rules only when it moved; force (a
// notification said it moved) loads them at once. It notes the outcome in
// Status (and the log, once per problem) and returns it.
func (p *Postgres) refreshNow(ctx context.Context, force bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.refreshLocked(ctx, force)
	if err != nil && errors.Is(ctx.Err(), context.Canceled) {
		return err // Run is stopping: nothing to note
	}
	p.noteLocked(err)
	return err
}

// refreshLocked is refreshNow's work. p.mu must be held.
func (p *Postgres) refreshLocked(ctx context.Context, force bool) error {
	if err := p.migrateLocked(ctx); err != nil {
		return err
	}
	cur := p.cur.Load()
	why := p.refused.Load()
	if !force && cur != nil && (cur.fromDB || why != nil) {
		var h head
		if err := p.pool.QueryRow(ctx, headSQL).Scan(&h.revision, &h.id); err != nil {
			return p.tablesGone(err, cur)
		}
		switch {
		case why != nil && h == p.seen:
			return refusedError{*why} // nothing moved since it was refused
		case why == nil && h.id == cur.db && h.revision == cur.ix.Revision():
			return nil
		}
	}
	set, id, err := loadSet(ctx, p.pool)
	if err != nil {
		return p.tablesGone(err, cur)
	}
	if cur != nil {
		if err := p.judgeLocked(ctx, cur, head{set.Revision, id}); err != nil {
			if isRefused(err) {
				p.seen = head{set.Revision, id}
			}
			return err
		}
		if cur.fromDB && cur.db == id && set.Revision == cur.ix.Revision() {
			return nil
		}
	}
	ix, err := rules.Compile(set)
	if err != nil {
		return badDataError{fmt.Errorf("the rules in the database do not load: %w", err)}
	}
	p.installLocked(ix, true, id)
	return nil
}

// noteLocked records the outcome of a database access in Status and logs
// the changes of state: unreachable, bad data, refused, healthy again.
// p.mu must be held.
func (p *Postgres) noteLocked(err error) {
	rev := int64(0)
	if cur := p.cur.Load(); cur != nil {
		rev = cur.ix.Revision()
	}
	why := p.refused.Load()
	switch {
	case err == nil:
		if !p.down && p.badData == "" && why == nil {
			return
		}
		switch {
		case why != nil:
			p.log.Info("rulestore: the rules database is accepted again", "database", p.loc, "revision", rev)
		case p.down:
			p.log.Info("rulestore: rules database reachable again", "database", p.loc, "revision", rev)
		default:
			p.log.Info("rulestore: the rules in the database load again", "database", p.loc, "revision", rev)
		}
		p.down, p.badData = false, ""
		p.refused.Store(nil)
		p.setError("", false)
		return
	case isRefused(err):
		msg := err.Error()
		if why == nil || *why != msg {
			p.log.Error("rulestore: refusing the rules database", "database", p.loc, "revision", rev, "error", msg)
		}
		p.down, p.badData = false, ""
		p.refused.Store(&msg)
		p.setError("rulestore: "+msg, true)
		return
	case isBadData(err):
		msg := err.Error()
		if msg != p.badData {
			p.log.Error("rulestore: the rules database holds rules that do not load; keeping the last good rules",
				"database", p.loc, "revision", rev, "error", err)
		}
		p.down, p.badData = false, msg
		p.refused.Store(nil)
		p.setError(fmt.Sprintf("rulestore: the rules database %s: %s; serving the last good rules", p.loc, msg), false)
		return
	}
	if why != nil {
		// A refused database that is now unreachable stays refused: only
		// a check that accepts it ends the refusal.
		if !p.down {
			p.log.Warn("rulestore: rules database unreachable", "database", p.loc, "revision", rev, "error", err)
		}
		p.down = true
		return
	}
	if !p.down {
		p.log.Warn("rulestore: rules database unreachable; keeping the last good rules and retrying",
			"database", p.loc, "revision", rev, "error", err)
	}
	p.down = true
	msg := err.Error() // an Update's error says it all
	if !errors.Is(err, ErrUnavailable) {
		msg = fmt.Sprintf("rulestore: the rules database %s is unreachable: %v; serving the last good rules", p.loc, err)
	}
	p.setError(msg, false)
}

// setError sets Status().Error (and ErrorAt, when the error starts) and
// Refused.
func (p *Postgres) setError(msg string, refused bool) {
	now := p.now()
	p.stMu.Lock()
	defer p.stMu.Unlock()
	p.st.Refused = refused
	switch {
	case msg == "":
		p.st.Error, p.st.ErrorAt = "", time.Time{}
	case p.st.Error == "":
		p.st.Error, p.st.ErrorAt = msg, now
	default:
		p.st.Error = msg
	}
}

// installLocked puts ix, the rules of database db, in force, writes the
// snapshot (when fromDB), and tells the subscribers. p.mu must be held,
// which keeps the calls in order.
func (p *Postgres) installLocked(ix *rules.Index, fromDB bool, db string) {
	p.cur.Store(&inForce{ix: ix, fromDB: fromDB, db: db})
	now := p.now()
	p.stMu.Lock()
	p.st.Revision, p.st.Loaded, p.st.Database = ix.Revision(), now, db
	p.stMu.Unlock()
	if fromDB && p.snapshot != "" {
		if err := p.writeSnapshot(ix.Set(), db); err != nil {
			p.log.Warn("rulestore: cannot write the rules snapshot", "snapshot", p.snapshot, "error", err)
		}
	}
	p.subMu.Lock()
	subs := p.subs
	p.subMu.Unlock()
	for _, fn := range subs {
		fn(ix)
	}
}

// Run listens for change notifications (unless NoNotify) and refreshes
// every RefreshInterval and on every notification, until ctx is done
// (returning ctx.Err()) or the store is closed (returning nil). While the
// database is unreachable it keeps trying; see the type's doc.
func (p *Postgres) Run(ctx context.Context) error {
	p.runMu.Lock()
	if p.closed {
		p.runMu.Unlock()
		return nil
	}
	p.wg.Add(1)
	p.runMu.Unlock()
	defer p.wg.Done()

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-rctx.Done():
		}
	}()
	kick := make(chan struct{}, 1)
	var lwg sync.WaitGroup
	if p.notify {
		lwg.Add(1)
		go func() {
			defer lwg.Done()
			p.listen(rctx, kick)
		}()
	}
	c, stop := p.tick(p.refresh)
	defer stop()
	var force bool
	for {
		select {
		case <-rctx.Done():
			cancel()
			lwg.Wait()
			return ctx.Err()
		case <-c:
			force = false
		case <-kick:
			force = true
		}
		rf, rcancel := context.WithTimeout(rctx, p.writeTO)
		_ = p.refreshNow(rf, force) // problems are logged and kept in Status
		rcancel()
	}
}

// Backoff of the listener's reconnections.
const (
	minListenBackoff = 100 * time.Millisecond
	maxListenBackoff = 3 * time.Second
)

// listen keeps a connection LISTENing on NotifyChannel and kicks a refresh
// on every notification of a revision other than the one in force, and
// after every (re)connection, since notifications sent meanwhile are lost.
// It reconnects with exponential backoff until ctx is done.
func (p *Postgres) listen(ctx context.Context, kick chan<- struct{}) {
	backoff := minListenBackoff
	lost := false
	for {
		err := p.listenOnce(ctx, kick, func() {
			backoff = minListenBackoff
			if lost {
				p.log.Info("rulestore: listening for rule changes again", "database", p.loc, "channel", NotifyChannel)
				lost = false
			}
		})
		if ctx.Err() != nil {
			return
		}
		if !lost {
			p.log.Warn("rulestore: lost the rule change notifications; reconnecting (the refresh keeps rules current meanwhile)",
				"database", p.loc, "error", err)
			lost = true
		}
		select {
		case <-ctx.Done():
			return
		case <-p.after(backoff):
		}
		backoff = min(backoff*2, maxListenBackoff)
	}
}

// listenOnce connects, LISTENs, calls listening, and waits for
// notifications until the connection fails or ctx is done. An idle
// connection is pinged every RefreshInterval, so that a dead one is found.
func (p *Postgres) listenOnce(ctx context.Context, kick chan<- struct{}, listening func()) error {
	cctx, cancel := context.WithTimeout(ctx, p.connTO)
	conn, err := pgx.ConnectConfig(cctx, p.connCfg.Copy())
	cancel()
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return err
	}
	listening()
	kickNow(kick)
	for {
		wctx, cancel := context.WithTimeout(ctx, p.refresh)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			rev, perr := strconv.ParseInt(n.Payload, 10, 64)
			if perr != nil || rev != p.Current().Revision() {
				kickNow(kick)
			}
		case ctx.Err() != nil:
			return ctx.Err()
		case pgconn.Timeout(err):
			pctx, cancel := context.WithTimeout(ctx, p.connTO)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return err
			}
		default:
			return err
		}
	}
}

// kickNow asks Run for a refresh; one pending request is enough.
func kickNow(kick chan<- struct{}) {
	select {
	case kick <- struct{}{}:
	default:
	}
}

// Close stops Run, waits for it, and closes the connections; later Updates
// fail with ErrClosed, while Current keeps serving the last rules. It is
// safe to call more than once.
func (p *Postgres) Close() error {
	p.closeOnce.Do(func() {
		p.runMu.Lock()
		p.closed = true
		p.runMu.Unlock()
		close(p.done)
		p.wg.Wait()
		p.pool.Close()
	})
	return nil
}
