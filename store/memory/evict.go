package memory

import (
	"hash/maphash"
)

// makeRoom brings shard sh, at its ceiling lim, below it: it drops every
// idle bucket of the shard (they carry no state) once per second, and when
// that is not enough evicts one bucket (evict), which it reports. The
// caller holds sh.mu.
func (s *Store) makeRoom(sh *shard, lim int, sec int64, slots []slot) bool {
	if sh.reclaimed != sec {
		sh.reclaimed = sec
		for _, t := range sh.list {
			for idx := range t.ents {
				if e := &t.ents[idx]; e.kind != freeKind && expired(e.exp, sec) && !inCall(slots, t, idx) {
					t.remove(uint32(maphash.String(s.seed, e.client)>>32), idx)
					sh.n--
				}
			}
		}
		if sh.n < lim {
			return false
		}
	}
	return s.evict(sh, sec, slots)
}

// evictSample is how many buckets an eviction compares: more picks a
// bucket closer to full, at the cost of a longer scan under the lock.
const evictSample = 16

// evict drops one bucket of sh to make room for a new one and reports
// whether it did: from the eviction hand on, it looks at buckets until it
// meets a full one (idle at sec: it carries no state) or has compared
// evictSample, skipping those of the current call, and drops the one with
// the earliest expiry, which is the one closest to full. It looks at each
// entry of the shard at most once, so it finds nothing only when every
// bucket is the call's own. The caller holds sh.mu.
func (s *Store) evict(sh *shard, sec int64, slots []slot) bool {
	total := 0
	for _, t := range sh.list {
		total += len(t.ents)
	}
	var best *table
	bestIdx, seen := -1, 0
	ti, i := int(sh.handT), int(sh.handI)
	for range total {
		for ti >= len(sh.list) || i >= len(sh.list[ti].ents) {
			if ti++; ti >= len(sh.list) {
				ti = 0
			}
			i = 0
		}
		t, idx := sh.list[ti], i
		i++
		e := &t.ents[idx]
		if e.kind == freeKind || inCall(slots, t, idx) {
			continue
		}
		if best == nil || e.exp < best.ents[bestIdx].exp {
			best, bestIdx = t, idx
		}
		if seen++; expired(e.exp, sec) || seen == evictSample {
			break
		}
	}
	sh.handT, sh.handI = int32(ti), int32(i)
	if best == nil {
		return false
	}
	best.remove(uint32(maphash.String(s.seed, best.ents[bestIdx].client)>>32), bestIdx)
	sh.n--
	sh.evicts++
	return true
}

// inCall reports whether entry idx of t is the bucket of one of slots.
func inCall(slots []slot, t *table, idx int) bool {
	for j := range slots {
		if slots[j].tab == t && slots[j].idx == idx {
			return true
		}
	}
	return false
}
