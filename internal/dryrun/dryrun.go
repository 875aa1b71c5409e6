// Package dryrun marks a context so that package limiter decides a call
// exactly as it would — the same rules matched and replaced, the same
// buckets, costs summed on a bucket several requests name, the same
// all-or-nothing judgement — but takes nothing: each bucket is read (an
// op of cost 0) and judged for the cost the take would have carried. It
// is how explain (internal/rls, internal/admin) shares the decision path
// instead of copying it; a contract between sluice's explain and its
// limiter, not part of the limiter API.
package dryrun

import "context"

// key is the context key of the mark.
type key struct{}

// Recorder receives what each Check or CheckMany under a marked context
// decided: Explained holds one limiter.Explanation per request of the
// last such call, in order (the limiter cannot be named here: it imports
// this package).
type Recorder struct {
	Explained []any
}

// With returns ctx marked, recording into rec.
func With(ctx context.Context, rec *Recorder) context.Context {
	return context.WithValue(ctx, key{}, rec)
}

// From returns the Recorder ctx is marked with, nil when it is not.
func From(ctx context.Context) *Recorder {
	rec, _ := ctx.Value(key{}).(*Recorder)
	return rec
}
