// Package dryrun holds what a dry run of package limiter records. A call
// whose request carries a Recorder (descriptor.Descriptor.Dry) is decided
// exactly as it would be — the same rules matched and replaced, the same
// buckets, costs summed on a bucket several requests name, the same
// all-or-nothing judgement — but takes nothing: each bucket is read (an
// op of cost 0) and judged for the cost the take would have carried. It
// is how explain (limiter.Explain, internal/rls's Explain) shares the
// decision path instead of copying it; a contract between sluice's
// explain and its limiter, not part of the limiter API.
package dryrun

// Recorder receives what a dry run decided: Explained holds one
// limiter.Explanation per request of the last Check or CheckMany that
// carried it, in order (the limiter cannot be named here: it imports
// this package).
type Recorder struct {
	Explained []any
}
