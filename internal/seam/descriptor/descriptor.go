// Package descriptor carries what the Envoy API adds to a limiter.Request
// and no other caller needs: one descriptor's entries and its own limit.
// They are not fields of the public limiter.Request; package limiter sets
// Attach when it loads, and the Envoy API (internal/rls) and explain
// (internal/admin, internal/cli) call it.
package descriptor

import (
	"github.com/sluicehq/sluice/internal/seam/dryrun"
	"github.com/sluicehq/sluice/rules"
)

// Descriptor is one Envoy descriptor as a limiter.Request reads it.
type Descriptor struct {
	// Entries are what rules keyed by entry:<key> read
	// (rulekey.Parse), and select the rules on descriptor entries
	// (rules.Index.MatchEntries).
	Entries []rules.Entry
	// Own, when set, is the descriptor's own limit (Envoy's descriptor
	// limit): it takes the place of the rules on descriptor entries,
	// which are then not applied; every other rule still is. Its bucket
	// is (OwnBucket, Own.ID). Own is read, never kept.
	Own       *rules.Compiled
	OwnBucket string
	// Dry, when set, makes the call a dry run recorded there (package
	// dryrun): decided as always, nothing taken. CheckMany reads the
	// first request's.
	Dry *dryrun.Recorder
}

// Attach makes d the descriptor of req, a *limiter.Request (nil detaches
// it). The limiter reads d during each call that takes req and keeps
// nothing of it. Package limiter sets Attach in its init.
var Attach func(req any, d *Descriptor)
