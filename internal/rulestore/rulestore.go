// Package rulestore keeps sluice's rule set: it loads it, serves the last
// good version to the hot path, takes changes from the admin API, and tells
// subscribers about every change.
//
// Source is the interface the server uses; File (a YAML file, edited by hand
// or through the API) serves one machine, Postgres (a database shared by a
// fleet, with the history of every change: Historian) serves many. Every
// implementation validates a rule set (rules.Compile) before it stores or
// serves it, so a Source never holds a set that does not compile, and a
// store that breaks leaves the last good set in force.
package rulestore

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/rules"
)

// Errors returned by a Source. Callers test them with errors.Is; the
// returned errors wrap them with detail.
var (
	// ErrConflict: Update was called with an ifRevision that is not the
	// current revision (an HTTP If-Match that does not match).
	ErrConflict = errors.New("rulestore: revision conflict")
	// ErrInvalid: the rule set an Update would store does not validate. The
	// error also wraps the *rules.FieldError that says which field is wrong.
	ErrInvalid = errors.New("rulestore: invalid rule set")
	// ErrUnavailable: the store cannot take changes now, e.g. the rules file
	// holds a hand edit that does not load (overwriting it would lose the
	// edit), it cannot be written (a full disk, a read-only file system or
	// file, no permission), or the rules database is unreachable or refused
	// the change. The error names the cause. Nothing was stored, and the
	// last good rules stay in force.
	ErrUnavailable = errors.New("rulestore: store cannot take changes now")
	// ErrNotFound: a rule, client or revision that was asked for does not
	// exist. Update does not return it itself (its callbacks may, to abort);
	// Historian.SetAt does, for a revision not made yet.
	ErrNotFound = errors.New("rulestore: not found")
	// ErrGone: Historian.SetAt was asked for a revision older than the
	// oldest the history still holds (it was trimmed, or the database was
	// restored from a snapshot at a later revision). The error names the
	// oldest revision kept.
	ErrGone = errors.New("rulestore: revision no longer kept")
	// ErrClosed: the Source was closed.
	ErrClosed = errors.New("rulestore: closed")
)

// Source is what the server needs from a rules store. Implementations are
// safe for concurrent use.
type Source interface {
	// Current returns the last good rules; never nil after the Source opened.
	Current() *rules.Index

	// Update changes the rule set: fn edits a clone of the current set; the
	// result is validated (rules.Compile), its Revision set to the current
	// revision + 1, persisted, and only then put in force and returned. A
	// result that encodes the same as the current set (rules.EncodeYAML,
	// revision aside) changes nothing: no new revision, no write, no history,
	// no subscriber call; the current rules are returned. If fn or any step
	// fails, nothing changes and the error is returned (fn's own error as
	// is). Under a context from WithDryRun, Update does all of this but
	// store and put in force: it returns what the change would put in
	// force, or the error it would get. ifRevision ≥ 0 must equal the current revision, else
	// the error wraps ErrConflict; -1 updates unconditionally. Concurrent
	// calls are serialized. fn must not call the Source.
	Update(ctx context.Context, ifRevision int64, fn func(*rules.Set) error) (*rules.Index, error)

	// Subscribe registers fn to be called with the new rules after every
	// change (through Update or from outside, e.g. a hand edit of the file),
	// one call at a time and in revision order. fn must be quick and must not
	// call Update.
	Subscribe(fn func(*rules.Index))

	// Status reports the store's state for /readyz.
	Status() Status

	// Run does the store's background work (for File: polling the file for
	// hand edits) until ctx is done or the Source is closed, and then returns
	// ctx.Err() (nil after Close).
	Run(ctx context.Context) error

	// Close stops Run and makes later Updates fail with ErrClosed. Current
	// keeps working.
	Close() error
}

// Status is the state of a Source, for /readyz and logs.
type Status struct {
	Kind     string    `json:"kind"`     // "file" or "postgres"
	Location string    `json:"location"` // the file path or the database (without password)
	Revision int64     `json:"revision"` // of the rules in force
	Loaded   time.Time `json:"loaded"`   // when the rules in force were loaded or stored
	// Error is the last load error ("" when the store is healthy): while it is
	// set, the rules in force are older than what the store holds.
	Error   string    `json:"error,omitempty"`
	ErrorAt time.Time `json:"error_at,omitzero"`
	// Database is the identity of the rules database the rules in force
	// come from (Postgres; "" for a file, or a snapshot written before
	// databases had one).
	Database string `json:"database,omitempty"`
	// Refused is true while the store refuses the database it reaches
	// (Postgres): another database than the one whose rules are in force,
	// or the same one at a lower revision. The rules in force stay, writes
	// fail with ErrUnavailable, and Error says why and what to do.
	Refused bool `json:"refused,omitempty"`
}

// Follow keeps src's rules in force through set: it calls set with the
// rules in force now, then with the new rules after every change (see
// Subscribe), logging each one. Call it before src runs, so that no change
// comes between the two.
func Follow(src Source, set func(*rules.Index), log *slog.Logger) {
	set(src.Current())
	src.Subscribe(func(ix *rules.Index) {
		set(ix)
		log.Info("rules in force", "revision", ix.Revision(), "rules", len(ix.Rules()))
	})
}
