package redis

import (
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/limiter"
)

// SetBatchWait sets s's coalescing window past Config's bounds (MaxBatchWait),
// so that tests on a loaded machine can hold a window open long enough for
// every call they make to find it. Call it before the first Take.
func SetBatchWait(s *Store, d time.Duration) { s.batch.wait = d }

// BatchState returns how many runs of s's batcher are out and how many
// keys are queued behind them.
func BatchState(s *Store) (inflight, queued int) {
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	return s.batch.inflight, s.batch.queued
}

// Remember caches the denials among res as a Take sent at sent would.
func Remember(c *DenialCache, ops []limiter.Op, res []algorithm.Result, sent time.Time, serverNow int64) {
	c.remember(ops, res, sent, serverNow)
}

// DenialShard is the shard of c that holds (client, rule).
func DenialShard(c *DenialCache, client, rule string) *denialShard {
	return c.shard(appendKey(nil, client, rule))
}

// DenialSwept is how many entries sweeps of full shards have looked at.
func DenialSwept(c *DenialCache) int64 { return c.swept.Load() }

// DenialsPerShard is how many entries a shard of the cache holds at most.
const DenialsPerShard = maxDenialsPerShard

// Crash closes s's connections as a process that dies would: the leases
// it holds are not given back (its callers must stop using it).
func Crash(s *Store) { s.client.Close() }
