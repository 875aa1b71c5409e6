package redis

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/limiter"
)

// DenialCache remembers, per bucket (client, rule), that the shared store
// answered "no capacity for a call of cost c before T", and until T denies
// calls of cost ≥ c on that bucket locally, without a round trip. An abusive
// client then costs Redis nothing until its bucket could really pass again.
//
// Why this never denies a call Redis would allow: a bucket's capacity at a
// future instant depends only on its state and the time. Between the denial
// and T the state changes only by calls taking from it — this instance's or
// any other's — and taking never adds capacity, so the earliest instant a
// call of cost c can pass only moves later. A call of larger cost needs at
// least as much. T is measured on this instance's monotonic clock from the
// moment the request was sent, which is no later than the instant Redis
// computed the answer, so the local deadline is never past the real one —
// as long as Redis's clock and this instance's run at the same rate. They
// may not: NTP slews a clock by up to 500 ppm, and a virtual machine's clock
// catches up after a pause. The deadline is therefore cut by clockMargin of
// the wait (and 1 µs for Redis's TIME, which truncates): a call in that last
// sliver goes to Redis, which decides it exactly.
// What does add capacity invalidates an entry: a rule edit (the cached
// Params no longer match the call's) ends it at once. Events outside the
// model — keys lost in a Redis restart or failover, or the give-back of a
// cross-shard call in the microseconds it runs — can make the cache deny a
// call that a fresh bucket would allow, until T at the latest.
//
// A cache outlives the Store that fills it: give one cache to every Store
// made for the same Redis (Config.Denials) and the denials hold across
// reconnects — through an outage (failover asks it while Redis is down:
// nobody can give a bucket capacity back meanwhile) and after Redis comes
// back, even empty. The cache reads no clock: every method takes the
// instant, from one clock for all its users (Config.Now).
//
// Safe for concurrent use; use NewDenialCache.
type DenialCache struct {
	seed   maphash.Seed
	shards [64]denialShard
	hits   atomic.Int64
	swept  atomic.Int64 // entries looked at by sweeps of full shards
}

type denialShard struct {
	mu sync.Mutex
	m  map[string]denial
}

type denial struct {
	until     time.Time // monotonic
	at        time.Time // when the denied request was sent
	serverNow int64     // the store clock of the denial (Unix µs)
	cost      int64
	params    algorithm.Params
	res       algorithm.Result
}

// clockMargin: a cached denial ends 1/clockMargin of its wait early, so that
// clocks running up to 0.1 % apart (twice NTP's 500 ppm slew limit) never
// make it deny a call Redis would allow.
const clockMargin = 1000

// maxDenialsPerShard bounds memory: past it, a sample of the entries is
// swept of expired ones before a new one is added (sweep), and if none of
// them expired the new one is dropped (Redis then decides that bucket's
// calls).
const maxDenialsPerShard = 1 << 14

// NewDenialCache returns an empty cache.
func NewDenialCache() *DenialCache {
	c := &DenialCache{seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].m = make(map[string]denial)
	}
	return c
}

func (c *DenialCache) shard(key []byte) *denialShard {
	return &c.shards[maphash.Bytes(c.seed, key)%uint64(len(c.shards))]
}

func appendKey(dst []byte, client, rule string) []byte {
	dst = append(dst, client...)
	dst = append(dst, 0)
	return append(dst, rule...)
}

// DenyLocally reports whether a remembered denial decides the call at now,
// filling res as Take would (see failover.LocalDenier).
func (c *DenialCache) DenyLocally(ops []limiter.Op, res []algorithm.Result, now time.Time) (limiter.TakeInfo, bool) {
	if serverNow, ok := c.check(ops, res, now); ok {
		return limiter.TakeInfo{Now: serverNow, Origin: limiter.OriginLocalDenialCache}, true
	}
	return limiter.TakeInfo{}, false
}

// check reports whether a cached denial decides the call. If so it fills
// res: the denying op with its remaining wait, the others as allowing (they
// are not evaluated: nothing is taken from a denied call).
func (c *DenialCache) check(ops []limiter.Op, res []algorithm.Result, now time.Time) (int64, bool) {
	var buf [256]byte
	for i := range ops {
		if ops[i].Params.Charge && ops[i].Cost > 0 {
			// A charge must reach the store: it is taken even when
			// its bucket denies.
			return 0, false
		}
	}
	for i := range ops {
		op := &ops[i]
		if op.Shadow {
			continue
		}
		key := appendKey(buf[:0], op.Client, op.Rule)
		sh := c.shard(key)
		sh.mu.Lock()
		d, ok := sh.m[string(key)]
		if ok && (!now.Before(d.until) || op.Params != d.params) {
			// Expired, or the rule was edited: under other params the
			// bucket may have gained capacity (a raised limit refills
			// faster), so the entry is void even if the edit is undone.
			delete(sh.m, string(key))
			ok = false
		}
		sh.mu.Unlock()
		if !ok || op.Cost < d.cost {
			continue
		}
		c.hits.Add(1)
		elapsed := now.Sub(d.at).Microseconds()
		for j := range ops {
			res[j] = algorithm.Result{Allowed: true, Remaining: 1 << 62}
		}
		r := d.res
		r.RetryAfter = (d.until.Sub(now) + time.Microsecond - 1).Microseconds()
		if r.RetryAfter < 1 {
			r.RetryAfter = 1
		}
		if r.ResetAfter -= elapsed; r.ResetAfter < r.RetryAfter {
			r.ResetAfter = r.RetryAfter
		}
		res[i] = r
		return d.serverNow + elapsed, true
	}
	return 0, false
}

// remember caches every denial with a wait among res.
func (c *DenialCache) remember(ops []limiter.Op, res []algorithm.Result, sent time.Time, serverNow int64) {
	var buf [256]byte
	for i := range ops {
		r := &res[i]
		if r.Allowed || r.Reason != algorithm.ReasonLimited || r.RetryAfter <= 0 || ops[i].Shadow {
			continue
		}
		op := &ops[i]
		key := appendKey(buf[:0], op.Client, op.Rule)
		wait := time.Duration(r.RetryAfter) * time.Microsecond
		d := denial{
			until:     sent.Add(wait - wait/clockMargin - time.Microsecond),
			at:        sent,
			serverNow: serverNow,
			cost:      op.Cost,
			params:    op.Params,
			res:       *r,
		}
		sh := c.shard(key)
		sh.mu.Lock()
		if len(sh.m) >= maxDenialsPerShard {
			c.sweep(sh, sent)
		}
		if old, ok := sh.m[string(key)]; ok && old.cost <= d.cost && old.params == d.params && !old.until.Before(d.until) {
			// keep the entry that covers more calls
		} else if len(sh.m) < maxDenialsPerShard {
			sh.m[string(key)] = d
		}
		sh.mu.Unlock()
	}
}

// sweepSample is how many entries of a full shard a new denial looks at
// for expired ones to delete, under the shard's lock: a sample, as Redis
// samples keys to expire, so that a full shard of live entries costs each
// new denial a few dozen map reads, not a scan of 16,384.
const sweepSample = 32

// sweep deletes the expired entries among sweepSample of sh's (Go's map
// iteration starts at a random place). sh.mu is held.
func (c *DenialCache) sweep(sh *denialShard, now time.Time) {
	n := 0
	for k, v := range sh.m {
		if !now.Before(v.until) {
			delete(sh.m, k)
		}
		if n++; n >= sweepSample {
			break
		}
	}
	c.swept.Add(int64(n))
}

// Hits returns how many calls the cache denied locally.
func (c *DenialCache) Hits() int64 { return c.hits.Load() }
