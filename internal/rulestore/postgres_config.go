package rulestore

import (
	"cmp"
	"errors"
	"log/slog"
	"strings"
	"time"
)

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
	if c.URL == "" {
		return errors.New("rulestore: postgres: a database URL is required, e.g. postgres://sluice@db:5432/sluice")
	}
	d := DefaultPostgresConfig()
	return cmp.Or(
		notNegative("postgres: refresh interval", c.RefreshInterval, d.RefreshInterval),
		notNegative("postgres: connect timeout", c.ConnectTimeout, d.ConnectTimeout),
		notNegative("postgres: write timeout", c.WriteTimeout, d.WriteTimeout),
		notNegative("postgres: max conns", c.MaxConns, d.MaxConns),
	)
}

func (c PostgresConfig) withDefaults() PostgresConfig {
	d := DefaultPostgresConfig()
	c.RefreshInterval = cmp.Or(c.RefreshInterval, d.RefreshInterval)
	c.ConnectTimeout = cmp.Or(c.ConnectTimeout, d.ConnectTimeout)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, d.WriteTimeout)
	c.MaxConns = cmp.Or(c.MaxConns, d.MaxConns)
	c.Logger, c.Now, c.Tick = runtimeDefaults(c.Logger, c.Now, c.Tick)
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
