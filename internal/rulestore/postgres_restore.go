package rulestore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/rules"
)

// RestoreConfig configures RestoreSnapshot.
type RestoreConfig struct {
	// URL of the rules database, as PostgresConfig.URL. Required.
	URL string
	// Snapshot is the snapshot file to restore (a --rules-snapshot file).
	// Required.
	Snapshot string
	// Force restores into a database that holds rules of its own (a
	// revision above 0) or a revision at least the snapshot's, replacing
	// its rules; and restores a snapshot that names no database (written
	// before databases had an identity), which running instances then do
	// not follow. Default false: those are refused.
	Force bool
	// Actor is recorded in the history as the restore's author. Default
	// "sluice rules restore".
	Actor string
	// ConnectTimeout bounds the connection to the database. Default 5s.
	ConnectTimeout time.Duration
}

// RestoreResult is what RestoreSnapshot did.
type RestoreResult struct {
	Location string // the database, without password
	// From and FromRevision are the database the snapshot's rules come
	// from and their revision.
	From         string
	FromRevision int64
	// Replaced and ReplacedRevision are the database's identity and
	// revision before the restore.
	Replaced         string
	ReplacedRevision int64
	// Database and Revision are the database's new identity and the
	// revision the restore wrote.
	Database string
	Revision int64
	Rules    int // rules restored
	Clients  int // clients restored
}

// RestoreSnapshot puts the rules of a snapshot file into the rules
// database, so that a fleet that refused the database (it was replaced,
// or went back to an older revision) takes it again. In one transaction,
// under the same row lock as every Update, it creates or migrates the
// schema, writes the snapshot's rules, clients and default plan as one
// change (history rows included) at revision max(database's, snapshot's)
// + 1, gives the database a new identity, records in sluice_lineage that
// it continues the snapshot's database up to the snapshot's revision (and
// its own former identity up to its former revision), and notifies every
// instance. An instance that served the snapshot's database at the
// snapshot's revision or lower then takes the restored rules; one that
// served a later revision keeps refusing (restore from its snapshot).
//
// Without Force it refuses a database that holds changes of its own
// (revision above 0) when it is not the snapshot's database, and the
// snapshot's database at the snapshot's revision or later, or a database
// restored from it at that revision or later: there is nothing to restore.
func RestoreSnapshot(ctx context.Context, cfg RestoreConfig) (*RestoreResult, error) {
	switch {
	case cfg.URL == "":
		return nil, errors.New("rulestore: restore: a database URL is required, e.g. postgres://sluice@db:5432/sluice")
	case cfg.Snapshot == "":
		return nil, errors.New("rulestore: restore: a snapshot file is required (the --rules-snapshot file of the instance with the highest revision)")
	}
	if cfg.Actor == "" {
		cfg.Actor = "sluice rules restore"
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultPostgresConfig().ConnectTimeout
	}
	snap, from, err := readSnapshot(cfg.Snapshot)
	if err != nil {
		return nil, fmt.Errorf("rulestore: restore: %w", err)
	}
	if from == "" && !cfg.Force {
		return nil, fmt.Errorf("rulestore: restore: the snapshot %s names no database (a sluice that did not record one wrote it), so instances that know their database would not take the restored rules; "+
			"--force restores it anyway (then restart those instances after removing their snapshots)", cfg.Snapshot)
	}
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("rulestore: restore: %w", err)
	}
	pc.MaxConns = 2
	if pc.ConnConfig.ConnectTimeout == 0 {
		pc.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	}
	if pc.ConnConfig.RuntimeParams["application_name"] == "" {
		pc.ConnConfig.RuntimeParams["application_name"] = "sluice rules restore"
	}
	loc := location(pc.ConnConfig)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("rulestore: restore: %w", err)
	}
	defer pool.Close()
	if _, err := migrate(ctx, pool); err != nil {
		return nil, fmt.Errorf("rulestore: restore: the rules database %s: migrate the schema: %w", loc, err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("rulestore: restore: the rules database %s: %w", loc, err)
	}
	defer rollback(tx)
	var h head
	if err := tx.QueryRow(ctx, headSQL+` FOR UPDATE`).Scan(&h.revision, &h.id); err != nil {
		return nil, fmt.Errorf("rulestore: restore: the rules database %s: lock the revision: %w", loc, err)
	}
	old, _, err := loadSet(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("rulestore: restore: the rules database %s: read its rules: %w", loc, err)
	}
	var restoredUpTo int64 = -1 // the snapshot's database is in the lineage up to this revision
	if from != "" {
		err := tx.QueryRow(ctx, `SELECT revision FROM sluice_lineage WHERE id = $1`, from).Scan(&restoredUpTo)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("rulestore: restore: the rules database %s: read its lineage: %w", loc, err)
		}
	}
	res := &RestoreResult{Location: loc, From: from, FromRevision: snap.Revision(), Replaced: h.id, ReplacedRevision: h.revision,
		Revision: max(h.revision, snap.Revision()) + 1, Rules: len(snap.Set().Rules), Clients: len(snap.Set().Clients)}
	switch {
	case cfg.Force:
	case h.id == from && h.revision >= snap.Revision():
		return nil, fmt.Errorf("rulestore: restore: the rules database %s is the snapshot's database (%s) at revision %d, not older than the snapshot's %d: nothing to restore "+
			"(--force writes the snapshot's rules over the database's)", loc, h.id, h.revision, snap.Revision())
	case restoredUpTo >= snap.Revision():
		return nil, fmt.Errorf("rulestore: restore: the rules database %s (%s, revision %d) was restored already from the snapshot's database %s at revision %d, not older than the snapshot's %d: nothing to restore "+
			"(--force writes the snapshot's rules over the database's)", loc, h.id, h.revision, from, restoredUpTo, snap.Revision())
	case h.id != from && h.revision > 0:
		return nil, fmt.Errorf("rulestore: restore: the rules database %s (%s) holds changes of its own (revision %d, %d rules), so it is not a fresh replacement of the snapshot's database %s; "+
			"--force replaces its rules with the snapshot's (its history keeps them)", loc, h.id, h.revision, len(old.Rules), from)
	}
	next := snap.Set().Clone()
	next.Revision = res.Revision
	ix, err := rules.Compile(next)
	if err != nil {
		return nil, fmt.Errorf("rulestore: restore: %s: %w", cfg.Snapshot, err)
	}
	b, err := changeBatch(old, ix.Set(), cfg.Actor)
	if err != nil {
		return nil, err
	}
	b.Queue(`UPDATE sluice_database SET id = gen_random_uuid(), restored_at = now() RETURNING id::text`).QueryRow(func(row pgx.Row) error {
		return row.Scan(&res.Database)
	})
	lineage := `INSERT INTO sluice_lineage (id, revision) VALUES ($1, $2)
		ON CONFLICT (id) DO UPDATE SET revision = GREATEST(sluice_lineage.revision, EXCLUDED.revision), restored_at = now()`
	if from != "" {
		b.Queue(lineage, from, snap.Revision())
	}
	b.Queue(lineage, h.id, h.revision)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("rulestore: restore: the rules database %s: write the rules: %w", loc, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("rulestore: restore: the rules database %s: commit (the restore may or may not have been stored; run it again to see): %w", loc, err)
	}
	return res, nil
}
