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

	watched

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
	p, err := newPostgres(ctx, cfg)
	if err != nil {
		return nil, err
	}
	snap, err := p.readStartSnapshot()
	if err == nil {
		err = p.start(ctx, snap)
	}
	if err != nil {
		p.pool.Close()
		return nil, err
	}
	return p, nil
}

// newPostgres makes the pool, which connects on demand, and the store
// over it, with no rules yet.
func newPostgres(ctx context.Context, cfg PostgresConfig) (*Postgres, error) {
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
	return p, nil
}

// readStartSnapshot reads the snapshot, when there is one, and puts its
// rules in p.cur, not yet in force: it says which database and revision
// this instance served last, and the database must be that one (or one it
// was restored into) at that revision or later. It returns nil when there
// is no snapshot.
func (p *Postgres) readStartSnapshot() (*rules.Index, error) {
	if p.snapshot == "" {
		return nil, nil
	}
	ix, id, serr := readSnapshot(p.snapshot)
	switch {
	case serr == nil:
		p.cur.Store(&inForce{ix: ix, db: id})
		return ix, nil
	case !errors.Is(serr, fs.ErrNotExist):
		return nil, fmt.Errorf("rulestore: the rules snapshot %s cannot be read, so this instance cannot tell whether the database holds its rules or older ones: %w "+
			"(fix the file, or remove it to take the database's rules as they are)", p.snapshot, serr)
	}
	return nil, nil
}

// start loads the database's rules within the connect timeout. When the
// database refuses them, or is unreachable and snap (the snapshot's
// rules) can stand in, it puts snap in force instead; any other failure
// is returned, saying what to do.
func (p *Postgres) start(ctx context.Context, snap *rules.Index) error {
	octx, cancel := context.WithTimeout(ctx, p.connTO)
	// Noted (and logged) only when the store is returned: an error that
	// stops the start is said once, by the error itself.
	p.mu.Lock()
	err := p.refreshLocked(octx, true)
	if err == nil || isRefused(err) || isUnavailable(err) && p.snapshot != "" && ctx.Err() == nil {
		p.noteLocked(err)
	}
	p.mu.Unlock()
	cancel()
	if err == nil {
		return nil
	}
	if isRefused(err) {
		p.mu.Lock()
		p.installLocked(snap, false, p.cur.Load().db)
		p.mu.Unlock()
		return nil // refreshNow logged why and what to do
	}
	if ctx.Err() != nil || !isUnavailable(err) || isMissingDatabase(err) || p.snapshot == "" {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "3D000" { // invalid_catalog_name
			db := p.pool.Config().ConnConfig.Database
			return fmt.Errorf("rulestore: the rules database %s: database %q does not exist: create it (CREATE DATABASE %s, owned by the role sluice connects as; sluice makes its tables), or fix the database name in --rules",
				p.loc, db, pgx.Identifier{db}.Sanitize())
		}
		if isUnavailable(err) && ctx.Err() == nil {
			return fmt.Errorf("rulestore: the rules database %s is unreachable: %w "+
				"(with --rules-snapshot FILE an instance starts on the last rules it saw while the database is down)", p.loc, err)
		}
		return fmt.Errorf("rulestore: the rules database %s: %w", p.loc, err)
	}
	if snap == nil {
		return fmt.Errorf("rulestore: the rules database %s is unreachable (%w), and the snapshot cannot stand in: %w", p.loc, err,
			&fs.PathError{Op: "open", Path: p.snapshot, Err: fs.ErrNotExist})
	}
	p.mu.Lock()
	p.installLocked(snap, false, p.cur.Load().db)
	p.mu.Unlock()
	p.log.Warn("rulestore: rules database unreachable at start; serving the snapshot until it is back",
		"database", p.loc, "snapshot", p.snapshot, "revision", snap.Revision(), "error", err)
	return nil
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

func (p *Postgres) isClosed() bool {
	p.runMu.Lock()
	defer p.runMu.Unlock()
	return p.closed
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
