package rulestore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/rules"
)

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
	p.editStatus(func(st *Status) {
		st.Refused = refused
		switch {
		case msg == "":
			st.Error, st.ErrorAt = "", time.Time{}
		case st.Error == "":
			st.Error, st.ErrorAt = msg, now
		default:
			st.Error = msg
		}
	})
}

// installLocked puts ix, the rules of database db, in force, writes the
// snapshot (when fromDB), and tells the subscribers. p.mu must be held,
// which keeps the calls in order.
func (p *Postgres) installLocked(ix *rules.Index, fromDB bool, db string) {
	p.cur.Store(&inForce{ix: ix, fromDB: fromDB, db: db})
	now := p.now()
	p.editStatus(func(st *Status) { st.Revision, st.Loaded, st.Database = ix.Revision(), now, db })
	if fromDB && p.snapshot != "" {
		if err := p.writeSnapshot(ix.Set(), db); err != nil {
			p.log.Warn("rulestore: cannot write the rules snapshot", "snapshot", p.snapshot, "error", err)
		}
	}
	p.tell(ix)
}
