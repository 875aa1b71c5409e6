package rulestore

import "context"

type dryRunKey struct{}

// WithDryRun returns a context under which Source.Update makes the change
// the way it always does — reads the store's head, checks ifRevision, runs
// fn, validates the result, and tries the write (File: the temporary file,
// not the rename; Postgres: the statements, in a transaction it then rolls
// back) — and stores nothing: it returns the rules the change would put in
// force, or the error the change would get, without a new revision and
// without calling subscribers. POST /apply?dry_run uses it, so that a dry
// run answers what the apply would.
func WithDryRun(ctx context.Context) context.Context {
	return context.WithValue(ctx, dryRunKey{}, true)
}

// isDryRun reports whether ctx came from WithDryRun.
func isDryRun(ctx context.Context) bool {
	v, _ := ctx.Value(dryRunKey{}).(bool)
	return v
}
