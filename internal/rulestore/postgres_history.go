package rulestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/seam/rulewire"
	"github.com/sluicehq/sluice/rules"
)

// History returns the recorded changes q selects, newest first; see
// Historian. An unreachable or refused database is an error wrapping
// ErrUnavailable.
func (p *Postgres) History(ctx context.Context, q HistoryQuery) ([]Change, error) {
	switch q.Kind {
	case "", KindRule, KindClient, KindDefaultPlan:
	default:
		return nil, fmt.Errorf("rulestore: history: kind %q: want %s, %s or %s", q.Kind, KindRule, KindClient, KindDefaultPlan)
	}
	limit := q.Limit
	switch {
	case limit <= 0:
		limit = DefaultHistoryLimit
	case limit > MaxHistoryLimit:
		limit = MaxHistoryLimit
	}
	if why := p.refused.Load(); why != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, refusedError{*why})
	}
	ctx, cancel := context.WithTimeout(ctx, p.writeTO)
	defer cancel()
	if err := p.ensureMigrated(ctx); err != nil {
		return nil, p.readError("read the history", err)
	}
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if q.Kind != "" {
		where = append(where, "h.kind = "+arg(q.Kind))
	}
	if q.ID != "" {
		where = append(where, "h.id = "+arg(q.ID))
	}
	if q.Before > 0 {
		where = append(where, "h.revision < "+arg(q.Before))
	}
	sql := `SELECT h.revision, r.at, r.actor, h.kind, h.id, h.op, h.before::text, h.after::text
		FROM sluice_history h JOIN sluice_revisions r ON r.revision = h.revision`
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	sql += " ORDER BY h.revision DESC, h.seq DESC LIMIT " + arg(limit)
	rows, err := p.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, p.readError("read the history", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Change, error) {
		var c Change
		var before, after *string
		err := row.Scan(&c.Revision, &c.Time, &c.Actor, &c.Kind, &c.ID, &c.Op, &before, &after)
		if before != nil {
			c.Before = []byte(*before)
		}
		if after != nil {
			c.After = []byte(*after)
		}
		return c, err
	})
	if err != nil {
		return nil, p.readError("read the history", err)
	}
	return out, nil
}

// SetAt returns the rule set in force at revision, rebuilt backwards from
// the set in force now: the value of each rule and client at that revision
// is the old value ("before") of its first change after it, or its value
// now when it has not changed since; the rule order and the default plan
// are that revision's (sluice_revisions). So it needs only the history
// after the revision, and a trimmed history (docs/fleet.md: old rows
// deleted) still answers for every revision it keeps; an older one is an
// error wrapping ErrGone that names the oldest revision kept. See
// Historian.
func (p *Postgres) SetAt(ctx context.Context, revision int64) (*rules.Set, error) {
	if revision < 0 {
		return nil, fmt.Errorf("%w: revision %d: revisions start at 0", ErrNotFound, revision)
	}
	if why := p.refused.Load(); why != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, refusedError{*why})
	}
	ctx, cancel := context.WithTimeout(ctx, p.writeTO)
	defer cancel()
	if err := p.ensureMigrated(ctx); err != nil {
		return nil, p.readError("read the history", err)
	}
	tx, err := p.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, p.readError("read the history", err)
	}
	defer rollback(tx)
	set, err := setAt(ctx, tx, revision)
	if err != nil {
		if isBadData(err) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrGone) {
			return nil, err
		}
		return nil, p.readError("read the history", err)
	}
	return set, nil
}

// oldestKept returns the oldest revision whose set setAt can rebuild: the
// oldest sluice_revisions row (0 when that is revision 1: the database's
// history is whole), but no older than the history reaches (its oldest
// row's revision - 1), so that a history trimmed without its revisions
// makes older revisions gone rather than rebuilt wrong. A database without
// revision rows keeps only head.
func oldestKept(ctx context.Context, tx pgx.Tx, head int64) (int64, error) {
	var minRev, minHist *int64
	if err := tx.QueryRow(ctx, `SELECT (SELECT min(revision) FROM sluice_revisions), (SELECT min(revision) FROM sluice_history)`).
		Scan(&minRev, &minHist); err != nil {
		return 0, err
	}
	if minRev == nil {
		return head, nil
	}
	oldest := *minRev
	if oldest == 1 {
		oldest = 0
	}
	if minHist != nil && *minHist-1 > oldest {
		oldest = *minHist - 1
	}
	return min(oldest, head), nil
}

func setAt(ctx context.Context, tx pgx.Tx, revision int64) (*rules.Set, error) {
	now, _, err := loadSet(ctx, tx)
	if err != nil {
		return nil, err
	}
	head := now.Revision
	if revision > head {
		return nil, fmt.Errorf("%w: revision %d does not exist; the current revision is %d", ErrNotFound, revision, head)
	}
	if revision == head {
		return now, nil
	}
	oldest, err := oldestKept(ctx, tx, head)
	if err != nil {
		return nil, err
	}
	gone := func(why string) error {
		return fmt.Errorf("%w: revision %d is %s (the history was trimmed, or the database restored from a snapshot); the oldest revision kept is %d",
			ErrGone, revision, why, oldest)
	}
	if revision < oldest {
		return nil, gone("no longer kept")
	}
	set := &rules.Set{Revision: revision}
	if revision == 0 {
		return set, nil
	}
	var order []string
	err = tx.QueryRow(ctx, `SELECT default_plan, rule_order FROM sluice_revisions WHERE revision = $1`, revision).
		Scan(&set.DefaultPlan, &order)
	if err == pgx.ErrNoRows {
		return nil, gone("not recorded in this database")
	}
	if err != nil {
		return nil, err
	}
	byID := make(map[string]rules.Rule, len(now.Rules))
	for _, r := range now.Rules {
		byID[r.ID] = r
	}
	clients := now.Clients
	rows, err := tx.Query(ctx, `SELECT DISTINCT ON (kind, id) kind, id, op, before::text
		FROM sluice_history WHERE revision > $1 AND kind IN ('rule', 'client')
		ORDER BY kind, id, revision, seq`, revision)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var kind, id, op string
		var before *string
		if err := rows.Scan(&kind, &id, &op, &before); err != nil {
			rows.Close()
			return nil, err
		}
		if before == nil {
			if op != OpCreate {
				rows.Close()
				return nil, badDataError{fmt.Errorf("sluice_history: the %s of %s %q has no old value", op, kind, id)}
			}
			if kind == KindRule {
				delete(byID, id)
			} else {
				delete(clients, id)
			}
			continue
		}
		switch kind {
		case KindRule:
			var r rules.Rule
			err := rulewire.DecodeRuleJSON([]byte(*before), &r)
			if err != nil {
				rows.Close()
				return nil, badDataError{fmt.Errorf("sluice_history: rule %q: %w", id, err)}
			}
			byID[id] = r
		case KindClient:
			var c rules.Client
			err := json.Unmarshal([]byte(*before), &c)
			if err == nil {
				err = c.Validate()
			}
			if err != nil {
				rows.Close()
				return nil, badDataError{fmt.Errorf("sluice_history: client %q: %w", id, err)}
			}
			if clients == nil {
				clients = map[string]rules.Client{}
			}
			clients[id] = c
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(clients) > 0 {
		set.Clients = clients
	}
	set.Rules = make([]rules.Rule, 0, len(order))
	for _, id := range order {
		r, ok := byID[id]
		if !ok {
			return nil, badDataError{fmt.Errorf("sluice_history: rule %q is in force at revision %d but neither its history after it nor sluice_rules holds it", id, revision)}
		}
		set.Rules = append(set.Rules, r)
	}
	return set, nil
}

// readError describes a failed read of the history: ErrUnavailable when
// the database is unreachable.
func (p *Postgres) readError(step string, err error) error {
	if isUnavailable(err) {
		return fmt.Errorf("%w: the rules database %s is unreachable (%s: %w)", ErrUnavailable, p.loc, step, err)
	}
	return fmt.Errorf("rulestore: postgres: %s: %w", step, err)
}
