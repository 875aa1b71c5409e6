package limiter

import (
	"context"

	"github.com/sluicehq/sluice/algorithm"
)

// Op is one rule's part of a call: take Cost from the bucket of (Client,
// Rule) under Params.
type Op struct {
	Client string // client id, e.g. "user:alice", "ip:203.0.113.7"
	Rule   string // rule id
	Params algorithm.Params
	Cost   int64
	// Shadow ops are evaluated and, when the call is allowed, consumed like
	// the others, but their denial never vetoes the call.
	Shadow bool
}

// Store holds bucket state. Implementations: store/memory (embedded) and
// store/redis (shared).
type Store interface {
	// Take applies ops, the matching rules of one call, atomically and all or
	// nothing: if every non-shadow op allows, every allowing op is consumed;
	// if any non-shadow op denies, nothing is consumed from any bucket. It
	// writes one result per op into res (len(res) ≥ len(ops)) and returns the
	// store's clock reading (Unix µs) the decisions were made at.
	Take(ctx context.Context, ops []Op, res []algorithm.Result) (now int64, err error)
}
