package memory

import (
	"hash/maphash"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/limiter"
)

// makeRoom tries to bring shard sh, at its ceiling lim, below it, and
// reports whether it did. It drops only full buckets (idle at sec: they
// carry no state, so dropping one changes no decision): every one of the
// shard once per second, else the next one the eviction hand finds
// (evict). A bucket with state is never dropped: that would hand its
// caller a fresh allowance. The caller holds sh.mu.
func (s *Store) makeRoom(sh *shard, lim int, sec int64, slots []slot) bool {
	if sh.reclaimed != sec {
		sh.reclaimed = sec
		for _, t := range sh.list {
			for idx := range t.ents {
				if e := &t.ents[idx]; e.kind != freeKind && expired(e.exp, sec) && !inCall(slots, t, idx) {
					t.remove(uint32(maphash.String(s.seed, e.client)>>32), idx)
					sh.n--
					sh.evicts++
				}
			}
		}
		if sh.n < lim {
			return true
		}
	}
	for sh.n >= lim {
		if !s.evict(sh, sec, slots) {
			return false
		}
	}
	return true
}

// evictSample is how many buckets an eviction looks at for a full one:
// more finds one more often, at the cost of a longer scan under the lock.
const evictSample = 64

// evict drops one full bucket of sh (idle at sec), the first the eviction
// hand meets among the next evictSample buckets, skipping those of the
// current call, and reports whether it found one. The hand goes round the
// shard from call to call, so every bucket is looked at in turn. The
// caller holds sh.mu.
func (s *Store) evict(sh *shard, sec int64, slots []slot) bool {
	total := 0
	for _, t := range sh.list {
		total += len(t.ents)
	}
	seen := 0
	ti, i := int(sh.handT), int(sh.handI)
	defer func() { sh.handT, sh.handI = int32(ti), int32(i) }()
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
		if expired(e.exp, sec) {
			t.remove(uint32(maphash.String(s.seed, e.client)>>32), idx)
			sh.n--
			sh.evicts++
			return true
		}
		if seen++; seen == evictSample {
			break
		}
	}
	return false
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

// loadNew is load for a bucket that shard sh does not hold (sl.tab is the
// rule's table in the shard, or nil). It makes room for the bucket when
// the shard is at its ceiling, counting the new buckets of the call's
// earlier ops; when no full bucket can be dropped, the op is decided on
// the overflow bucket of its rule in the shard (sl.over), which every new
// caller of that rule in the shard then shares. Either way the state the
// op starts from is the overflow bucket's while that one is not full, and
// a full bucket otherwise: a caller decided on the overflow bucket gets
// no fresh allowance when it later gets a bucket of its own. The caller
// holds sh.mu.
//
// stepped says that the call's earlier ops have been decided (sl.st holds
// their new state), as Take decides them one after the other: an op on
// an overflow bucket an earlier op of the call was decided on (CheckMany,
// several callers of one rule) starts from that op's new state, so that
// the one write of the bucket the call ends with counts both.
func (s *Store) loadNew(op *limiter.Op, sl *slot, sh *shard, sec int64, st *algorithm.State, slots []slot, stepped bool) {
	k := sl.shard(s.mask)
	lim := s.perShard
	if k < s.extra {
		lim++
	}
	for j := range slots {
		o := &slots[j]
		if o == sl {
			break
		}
		if o.idx < 0 && !o.over && o.shard(s.mask) == k {
			lim-- // room an earlier op of the call holds for its new bucket
		}
	}
	if sh.n >= lim && !s.makeRoom(sh, lim, sec, slots) {
		sl.over = true
		sh.overflows++
		if sl.tab == nil {
			sl.tab = tableFor(sh, op.Rule)
		}
		if stepped && s.afterEarlierOver(op, sl, st, slots) {
			return
		}
	}
	tab := sl.tab
	if tab == nil || tab.over.kind != op.Params.Kind || expired(tab.over.exp, sec) {
		return // the zero state: a full bucket
	}
	o := &tab.over
	if o.kind != algorithm.SlidingLog {
		st.T, st.A, st.B = o.t, o.a, o.b
		return
	}
	if sl.over {
		sl.l = tab.overLog
		st.Log = tab.overLog.ready(op.Cost)
	} else {
		st.Log = slices.Clone(tab.overLog.log) // the new bucket's own
	}
}

// afterEarlierOver starts op, decided on an overflow bucket (sl.over), from
// the new state of the last earlier op of the call decided on the same
// one, if any, and reports whether there was one.
func (s *Store) afterEarlierOver(op *limiter.Op, sl *slot, st *algorithm.State, slots []slot) bool {
	var prev *slot
	for j := range slots {
		o := &slots[j]
		if o == sl {
			break
		}
		if o.over && o.tab == sl.tab {
			prev = o
		}
	}
	if prev == nil {
		return false
	}
	if op.Params.Kind == algorithm.SlidingLog {
		st.Log = slices.Clone(prev.st.Log) // written as the bucket's own new log
		return true
	}
	st.T, st.A, st.B = prev.st.T, prev.st.A, prev.st.B
	return true
}

// tableFor returns the table of rule in sh, made if sh has none. The
// caller holds sh.mu.
func tableFor(sh *shard, rule string) *table {
	tab := sh.tables[rule]
	if tab == nil {
		tab = newTable(strings.Clone(rule))
		sh.tables[tab.rule] = tab
		sh.list = append(sh.list, tab)
	}
	return tab
}

// storeOver writes st, the state of an op decided on the overflow bucket
// (sl.over), to that bucket: the one of op's rule in op's shard. The
// caller holds the shard's lock.
func (s *Store) storeOver(op *limiter.Op, sl *slot, st *algorithm.State, exp uint32) {
	tab := sl.tab // loadNew made it
	o := &tab.over
	if op.Params.Kind != algorithm.SlidingLog {
		tab.overLog = nil
		o.t, o.a, o.b, o.exp, o.kind = st.T, st.A, st.B, exp, op.Params.Kind
		return
	}
	if l := sl.l; l != nil {
		l.keep(st.Log)
	} else {
		tab.overLog = &logEntry{log: st.Log, buf: st.Log[:cap(st.Log)]}
	}
	*o = entry{exp: exp, kind: algorithm.SlidingLog}
}
