package rulestore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The identity of a rules database, and the refusal of a database that is
// not the one whose rules are in force; see the Postgres type's doc.

// head is a database's revision and identity.
type head struct {
	revision int64
	id       string
}

// isMissingDatabase reports an error of a database that does not exist:
// at start a mistake to fix (a wrong name), not an outage to ride out.
func isMissingDatabase(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "3D000"
}

// isUndefinedTable reports an error of a table that does not exist: the
// database lost sluice's tables (it was dropped and made again).
func isUndefinedTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42P01"
}

// refusedError is a database the store will not take rules from: another
// database than the one whose rules are in force, or the same one at a
// lower revision. Its message ("the rules database ...") says what to do.
type refusedError struct{ msg string }

func (e refusedError) Error() string { return e.msg }

func isRefused(err error) bool {
	var re refusedError
	return errors.As(err, &re)
}

// judgeLocked decides whether the store may take the rules of the
// database, at head h, in place of cur: when it is the same database at
// the same or a higher revision, or a database restored from a snapshot of
// cur's database at cur's revision or later (sluice_lineage). Otherwise it
// returns a refusedError that says why and what to do. p.mu must be held.
func (p *Postgres) judgeLocked(ctx context.Context, cur *inForce, h head) error {
	rev := cur.ix.Revision()
	switch {
	case cur.db == "" && h.revision < rev: // a snapshot from before databases had an identity
		return p.refusal(cur, fmt.Sprintf("is at revision %d, lower than the revision %d of this instance's snapshot", h.revision, rev), false)
	case cur.db == "":
		return nil
	case h.id == cur.db && h.revision < rev:
		return p.refusal(cur, fmt.Sprintf("went back from revision %d to %d (restored from an older backup?)", rev, h.revision), false)
	case h.id == cur.db:
		return nil
	}
	var upTo int64
	err := p.pool.QueryRow(ctx, `SELECT revision FROM sluice_lineage WHERE id = $1`, cur.db).Scan(&upTo)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return p.refusal(cur, fmt.Sprintf("is another database (id %s, revision %d) than the one whose rules this instance serves (id %s, revision %d)",
			h.id, h.revision, cur.db, rev), false)
	case err != nil:
		return err
	case rev > upTo:
		return p.refusal(cur, fmt.Sprintf("was restored from revision %d of database %s, but this instance serves revision %d of it: the restore lacks revisions %d to %d",
			upTo, cur.db, rev, upTo+1, rev), true)
	}
	p.log.Info("rulestore: the rules database was restored from the database whose rules this instance served; taking its rules",
		"database", p.loc, "id", h.id, "revision", h.revision, "restored_from", cur.db, "restored_revision", upTo, "was", rev)
	return nil
}

// refusal is the refusedError of a database that what describes; again:
// the database was restored already, from a snapshot older than this
// instance's rules.
func (p *Postgres) refusal(cur *inForce, what string, again bool) refusedError {
	snap, force := p.snapshot, ""
	if abs, err := filepath.Abs(snap); err == nil && snap != "" {
		snap = abs
	}
	if snap == "" {
		snap = "FILE (the --rules-snapshot of the instance with the highest revision)"
	}
	if again {
		force = "--force "
	}
	return refusedError{fmt.Sprintf("the rules database %s %s. This instance keeps serving its rules (revision %d) and refuses writes "+
		"until they are restored into the database: sluice rules restore %s--from-snapshot %s --rules %s; then every instance takes the restored rules",
		p.loc, what, cur.ix.Revision(), force, snap, p.loc)}
}

// tablesGone turns the error of a database without sluice's tables (made
// again empty under a running instance) into a refusal; other errors are
// returned as they are.
func (p *Postgres) tablesGone(err error, cur *inForce) error {
	if cur == nil || !isUndefinedTable(err) {
		return err
	}
	return p.refusal(cur, fmt.Sprintf("lacks sluice's tables (%v): it was dropped and made again, or its tables were dropped", err), false)
}
