package memory

import (
	"hash/maphash"
	"time"
)

// Sweep drops the buckets idle at now (Unix µs) and returns how many it
// dropped. It holds a shard's lock for at most sweepChunk buckets at a time.
// The background sweeper does the same on a slice of the shards every
// SweepInterval/16.
func (s *Store) Sweep(now int64) int {
	return s.sweep(0, len(s.shards), now)
}

// sweepSlices is the number of slices the background sweeper divides the
// shards into, sweeping one slice per tick.
const sweepSlices = 16

// sweepChunk is the number of entries a sweep examines per lock.
const sweepChunk = 1024

func (s *Store) sweep(lo, hi int, now int64) int {
	sec := s.seconds(now)
	total := 0
	var buf [8]*table
	tabs := buf[:0]
	for i := lo; i < hi; i++ {
		sh := &s.shards[i]
		sh.mu.Lock()
		tabs = tabs[:0]
		for _, t := range sh.tables {
			tabs = append(tabs, t)
		}
		sh.mu.Unlock()
		for _, t := range tabs {
			for start := 0; ; start += sweepChunk {
				sh.mu.Lock()
				if start >= len(t.ents) {
					// Done with t: drop it when it holds nothing (its
					// overflow bucket full too), else compact it. t may be
					// gone already (another sweep dropped it, empty).
					if t.n == 0 && sh.tables[t.rule] == t && (t.over.kind == freeKind || expired(t.over.exp, sec)) {
						delete(sh.tables, t.rule)
						sh.dropList(t)
						for i, l := range sh.last {
							if l == t {
								sh.last[i] = nil
							}
						}
					} else {
						t.shrink()
					}
					sh.mu.Unlock()
					break
				}
				dropped := 0
				for idx := start; idx < min(start+sweepChunk, len(t.ents)); idx++ {
					if e := &t.ents[idx]; e.kind != freeKind && expired(e.exp, sec) {
						t.remove(uint32(maphash.String(s.seed, e.client)>>32), idx)
						dropped++
					}
				}
				sh.n -= dropped
				sh.mu.Unlock()
				total += dropped
			}
		}
	}
	return total
}

// dropList removes t from sh.list. The caller holds sh.mu.
func (sh *shard) dropList(t *table) {
	for i, u := range sh.list {
		if u == t {
			last := len(sh.list) - 1
			sh.list[i], sh.list[last] = sh.list[last], nil
			sh.list = sh.list[:last]
			return
		}
	}
}

// sweeper sweeps one slice of the shards every interval/sweepSlices, so
// that every shard is swept once per interval, until Close.
func (s *Store) sweeper(interval time.Duration) {
	defer close(s.done)
	step := max(interval/sweepSlices, time.Millisecond)
	per := max(len(s.shards)/sweepSlices, 1)
	tick := time.NewTicker(step)
	defer tick.Stop()
	next := 0
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
			hi := min(next+per, len(s.shards))
			s.sweep(next, hi, s.clock())
			next = hi % len(s.shards)
		}
	}
}
