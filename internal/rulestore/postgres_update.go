package rulestore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicehq/sluice/rules"
)

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
