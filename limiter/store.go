package limiter

import (
	"context"
	"errors"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/rules"
)

// Op is one rule's part of a call: take Cost from the bucket of (Client,
// Rule) under Params.
type Op struct {
	Client string // client id, e.g. "user:alice", "ip:203.0.113.7"
	Rule   string // rule id
	Params algorithm.Params
	Cost   int64 // 0 reads the bucket and takes nothing (algorithm.Apply)
	// Shadow ops are evaluated and, when the call is allowed, consumed like
	// the others, but their denial never vetoes the call.
	Shadow bool
	// FailClosed ops deny while the shared store is unavailable; the others
	// (failure_mode: open) are served from a coarse local limit meanwhile.
	FailClosed bool
	// Lease says whether a shared store may decide the op from a batch of
	// the bucket's tokens leased to this instance: the rule's lease mode,
	// "" meaning rules.LeaseAuto. A store that does not lease ignores it.
	Lease rules.LeaseMode
}

// Origin says where a decision came from.
type Origin uint8

const (
	// OriginStore: the counter store answered (embedded or shared).
	OriginStore Origin = iota
	// OriginLocalDenialCache: a denial the shared store gave earlier is
	// still in force; no round trip was made.
	OriginLocalDenialCache
	// OriginLease: every rule of the call was decided from tokens this
	// instance leased from the shared store earlier (a hot bucket); no
	// round trip was made.
	OriginLease
	// OriginLocalFallback: the shared store is unavailable; the call was
	// decided by a coarse in-process limit (rules with failure_mode: open).
	OriginLocalFallback
	// OriginUnavailable: the shared store is unavailable and a matching rule
	// fails closed: the call is denied.
	OriginUnavailable
)

var originNames = [...]string{"store", "local_denial_cache", "lease", "local_fallback", "unavailable"}

// String returns the name used in metrics and answers, e.g. "local_fallback".
func (s Origin) String() string {
	if int(s) < len(originNames) {
		return originNames[s]
	}
	return "unknown"
}

// Degraded reports whether the decision was made without the shared store.
func (s Origin) Degraded() bool { return s == OriginLocalFallback || s == OriginUnavailable }

// TakeInfo is what a Store reports about a Take besides the per-op results.
type TakeInfo struct {
	Now    int64  // the store's clock reading the decisions were made at (Unix µs)
	Origin Origin // where the decisions came from
}

// ErrStoreReply is wrapped by a store's error when the store answered but
// its answer for the call cannot be read: a fault of that call, not of the
// store. A failover store decides such a call as while the store is
// unavailable, without counting it toward opening its breaker.
var ErrStoreReply = errors.New("limiter: the store's answer cannot be read")

// Store holds bucket state. Implementations: store/memory (embedded) and
// store/redis (shared).
type Store interface {
	// Take applies ops, the matching rules of one call, atomically and all or
	// nothing: if every non-shadow op allows, every allowing op is consumed;
	// if any non-shadow op denies, nothing is consumed from any bucket. It
	// writes one result per op into res (len(res) ≥ len(ops)) and reports the
	// store's clock reading (Unix µs) the decisions were made at and their
	// source.
	Take(ctx context.Context, ops []Op, res []algorithm.Result) (TakeInfo, error)
}
