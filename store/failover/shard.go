package failover

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/limiter"
)

// sharder is what a Primary that spreads its buckets over shards (a Redis
// Cluster's masters) tells of it: the breaker is kept per shard, so that a
// shard that fails sends only its own callers to the local fallback while
// the others' decisions stay on the shared store.
type sharder interface {
	// Shard names the shard serving client's buckets: from a small set
	// (a cluster's masters), "" when there is one shard or it is not
	// known.
	Shard(client string) string
}

// shard is the breaker of one shard of the shared store (of the whole
// store when it has one shard): whether decisions for its clients go to
// the store, the calls out to it, its probes and its counts.
type shard struct {
	name string

	state  atomic.Int32 // Closed or Open
	reason atomic.Pointer[string]
	since  atomic.Int64 // Unix ns of the last transition
	// opened is cancelled when the breaker opens: the calls waiting on the
	// shard then return at once. A new one replaces it at recovery.
	opened   atomic.Pointer[epoch]
	failing  atomic.Pointer[string]    // the client the breaker opened on: what the prober asks about
	suspect  atomic.Pointer[string]    // the client of the last call that failed or went overdue: what the health check asks about
	queued   atomic.Bool               // a health check of the shard is queued or running
	probeOut atomic.Pointer[probeCall] // the probe out, if any
	window   atomic.Int64              // the failure-counting window (Unix ms / 100)
	calls    atomic.Int64              // calls in the window
	fails    atomic.Int64              // failed calls in the window

	ok, bad int // the prober's successes and failures in a row (prober only)

	openings, local atomic.Int64 // breaker openings; decisions made without the store
}

// maxShards bounds the shards a Store keeps a breaker for (and names in
// metrics): a cluster's masters. Past it, calls share the whole store's.
const maxShards = 64

// wholeShard names the breaker of a store of one shard, and of calls whose
// shard is not known.
const wholeShard = "all"

func newShard(name string) *shard {
	sh := &shard{name: name}
	sh.opened.Store(newEpoch())
	return sh
}

func (sh *shard) closed() bool { return State(sh.state.Load()) == Closed }

// shards holds the Store's breakers by shard name.
type shards struct {
	whole *shard
	mu    sync.Mutex // serializes adding one
	named sync.Map   // name → *shard
	n     atomic.Int32
}

// get returns the breaker of the shard named name.
func (ss *shards) get(name string) *shard {
	if name == "" {
		return ss.whole
	}
	if sh, ok := ss.named.Load(name); ok {
		return sh.(*shard)
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if sh, ok := ss.named.Load(name); ok {
		return sh.(*shard)
	}
	if ss.n.Load() >= maxShards {
		return ss.whole
	}
	sh := newShard(strings.Clone(name))
	ss.named.Store(sh.name, sh)
	ss.n.Add(1)
	return sh
}

// each calls fn for every breaker: the whole store's first.
func (ss *shards) each(fn func(*shard)) {
	fn(ss.whole)
	ss.named.Range(func(_, v any) bool { fn(v.(*shard)); return true })
}

// target is a shard a call goes to, and the call's first client there:
// what a probe of that shard asks about.
type target struct {
	sh     *shard
	client string
}

// targets lists the shards ops go to in buf: one per distinct shard, in
// the order of ops (the whole store's when p has one shard).
func (s *Store) targets(b *primaryBox, ops []limiter.Op, buf []target) []target {
	if b == nil || b.sharder == nil {
		return append(buf, target{s.shards.whole, clientOf(ops)})
	}
	last := ""
	for i := range ops {
		c := ops[i].Client
		if i > 0 && c == last {
			continue
		}
		last = c
		sh := s.shards.get(b.sharder.Shard(c))
		seen := false
		for _, t := range buf {
			if t.sh == sh {
				seen = true
				break
			}
		}
		if !seen {
			buf = append(buf, target{sh, c})
		}
	}
	if len(buf) == 0 {
		buf = append(buf, target{s.shards.whole, clientOf(ops)})
	}
	return buf
}

// open returns the first target whose breaker is open, or nil.
func open(ts []target) *shard {
	for _, t := range ts {
		if !t.sh.closed() {
			return t.sh
		}
	}
	return nil
}

// EachShard calls fn for the breaker of each shard of the shared store
// (on a cluster: each master it has sent calls to; "all" for a store of
// one shard, and for calls made before the shards were known): whether it
// is open, how many times it opened, and how many decisions its callers
// got without the store (local fallback and fail-closed denials).
func (s *Store) EachShard(fn func(name string, open bool, openings, local int64)) {
	s.shards.each(func(sh *shard) {
		fn(sh.name, !sh.closed(), sh.openings.Load(), sh.local.Load())
	})
}
