package rulestore

import (
	"context"
	"encoding/json"
	"time"

	"github.com/sluicehq/sluice/rules"
)

// actorKey is the context key of the actor of a change.
type actorKey struct{}

// WithActor returns a copy of ctx that names who makes the changes done
// with it: a Source that keeps a history (Postgres) records it with every
// Update. The admin API sets it from the X-Sluice-Actor header.
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// ActorFrom returns the actor WithActor put in ctx, or "" when there is none.
func ActorFrom(ctx context.Context) string {
	a, _ := ctx.Value(actorKey{}).(string)
	return a
}

// Values of Change.Kind and Change.Op.
const (
	KindRule        = "rule"
	KindClient      = "client"
	KindDefaultPlan = "default_plan"

	OpCreate = "create"
	OpUpdate = "update"
	OpDelete = "delete"
)

// Change is one recorded change of one rule, one client or the default
// plan: an entry of the audit history.
type Change struct {
	Revision int64     `json:"revision"` // the revision the change made
	Time     time.Time `json:"time"`     // when it was stored (the database's clock)
	Actor    string    `json:"actor"`    // who made it; see WithActor
	Kind     string    `json:"kind"`     // KindRule, KindClient or KindDefaultPlan
	ID       string    `json:"id,omitempty"`
	Op       string    `json:"op"` // OpCreate, OpUpdate or OpDelete
	// Before and After are the old and new value as JSON: a rule, a client
	// ({"plan": "..."}) or the default plan (a string). Before is absent for
	// a create, After for a delete.
	Before json.RawMessage `json:"before,omitempty"`
	After  json.RawMessage `json:"after,omitempty"`
}

// HistoryQuery selects entries of the history. The zero value selects the
// latest DefaultHistoryLimit changes of anything.
type HistoryQuery struct {
	Kind string // only changes of this kind; "" = any
	ID   string // only changes of this rule or client id; "" = any
	// Before, when > 0, selects changes made before that revision: to page
	// back, pass the oldest revision of the previous page.
	Before int64
	// Limit caps the number of entries; 0 = DefaultHistoryLimit, at most
	// MaxHistoryLimit.
	Limit int
}

// Bounds of HistoryQuery.Limit.
const (
	DefaultHistoryLimit = 100
	MaxHistoryLimit     = 1000
)

// Historian is what a Source that keeps a revision history offers on top of
// Source; the admin API serves it when its Source has it (the File does
// not). Implementations are safe for concurrent use.
type Historian interface {
	// History returns the changes q selects, newest first.
	History(ctx context.Context, q HistoryQuery) ([]Change, error)
	// SetAt returns the rule set that was in force at revision: its rules
	// in order, its clients and default plan, with Revision set. A revision
	// that does not exist (yet) is an error wrapping ErrNotFound.
	SetAt(ctx context.Context, revision int64) (*rules.Set, error)
}
