package memory

import "github.com/sluicehq/sluice/algorithm"

// table holds the buckets of one rule within one shard: a slab of entries
// and an open-addressing index over it (linear probing, backward-shift
// deletion, no tombstones). A slot is hash<<32 | (entry index + 1), 0 when
// empty, so the index can grow and shrink without hashing a key again.
// Entry indices are stable until shrink. All methods require the shard's
// lock.
//
// Compared with a map[string]*entry this keeps one allocation per bucket
// (its client id) instead of two, 8 bytes of index per slot instead of 24,
// and lets a sweep scan the entries in order, a bounded chunk per lock.
type table struct {
	rule  string   // the rule id, owned
	slots []uint64 // power-of-two length
	ents  []entry
	free  int64 // first free entry, -1 = none; free entries chain through entry.t
	n     int   // live entries
	// logs holds the logs of the SlidingLog entries, by entry index.
	logs map[uint32]*logEntry
	// over is the rule's overflow bucket in the shard (client ""; kind
	// freeKind while unused), shared by the callers the shard had no room
	// for (Store.loadNew); overLog is its log when it is a SlidingLog one.
	over    entry
	overLog *logEntry
}

// entry is one bucket: its client id and, for every algorithm but
// SlidingLog, its state. 48 bytes.
type entry struct {
	client string // owned copy; "" when free
	t      int64
	a, b   float64
	exp    uint32 // seconds after Store.epoch from which the bucket is idle
	kind   algorithm.Kind
}

// freeKind marks an unused entry.
const freeKind algorithm.Kind = 0xFF

// logEntry is the state of a SlidingLog bucket. The algorithm drops old
// entries by reslicing log from the front and appends at its end, so log
// walks forward through buf, the array it lives in (buf[:cap(buf)]), and is
// moved back to its start when it runs out of room: the log of a bucket
// that stays within its limit needs no new memory.
type logEntry struct {
	log []int64
	buf []int64
}

const minSlots = 8

func newTable(rule string) *table {
	return &table{rule: rule, slots: make([]uint64, minSlots), free: -1, over: entry{kind: freeKind}}
}

// find returns the index of client's entry, -1 if absent. h is the upper
// half of the client's hash.
func (t *table) find(h uint32, client string) int {
	mask := uint32(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := t.slots[i]
		if s == 0 {
			return -1
		}
		if uint32(s>>32) == h {
			if idx := int(uint32(s)) - 1; t.ents[idx].client == client {
				return idx
			}
		}
	}
}

// insert adds an entry for client, which must be absent and owned by the
// table from now on, and returns its index. The entry's state is zero.
func (t *table) insert(h uint32, client string) int {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.resize(len(t.slots) * 2)
	}
	var idx int
	if t.free >= 0 {
		idx = int(t.free)
		t.free = t.ents[idx].t
	} else {
		idx = len(t.ents)
		t.ents = append(t.ents, entry{})
	}
	t.ents[idx] = entry{client: client}
	t.place(uint64(h)<<32 | uint64(idx+1))
	t.n++
	return idx
}

// place puts slot s in the first empty slot from its home.
func (t *table) place(s uint64) {
	mask := uint32(len(t.slots) - 1)
	i := uint32(s>>32) & mask
	for t.slots[i] != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = s
}

// resize rebuilds the index with size slots.
func (t *table) resize(size int) {
	old := t.slots
	t.slots = make([]uint64, size)
	for _, s := range old {
		if s != 0 {
			t.place(s)
		}
	}
}

// remove drops entry idx, whose client hashes to h.
func (t *table) remove(h uint32, idx int) {
	mask := uint32(len(t.slots) - 1)
	want := uint64(h)<<32 | uint64(idx+1)
	i := h & mask
	for t.slots[i] != want {
		i = (i + 1) & mask
	}
	// Shift back every later slot of the run that may move to the hole:
	// the one at j (home k) may if i is not between k and j.
	for j := i; ; {
		j = (j + 1) & mask
		s := t.slots[j]
		if s == 0 {
			break
		}
		k := uint32(s>>32) & mask
		if (j-k)&mask >= (j-i)&mask {
			t.slots[i] = s
			i = j
		}
	}
	t.slots[i] = 0
	if t.ents[idx].kind == algorithm.SlidingLog {
		delete(t.logs, uint32(idx))
	}
	t.ents[idx] = entry{t: t.free, kind: freeKind}
	t.free = int64(idx)
	t.n--
}

// minShrink is the slab size below which a table is never compacted.
const minShrink = 1024

// shrink compacts a table that has fallen to a quarter of its slab or
// less, renumbering its entries: slices never give back memory otherwise.
func (t *table) shrink() {
	if len(t.ents) < minShrink || t.n*4 > len(t.ents) {
		return
	}
	size := minSlots
	for size*3 < t.n*4*2 { // at most 3/8 full
		size *= 2
	}
	old, oldEnts, oldLogs := t.slots, t.ents, t.logs
	t.slots = make([]uint64, size)
	t.ents = make([]entry, 0, t.n+t.n/4)
	t.free = -1
	if oldLogs != nil {
		t.logs = make(map[uint32]*logEntry, len(oldLogs))
	}
	for _, s := range old {
		if s == 0 {
			continue
		}
		idx := uint32(s) - 1
		nidx := uint32(len(t.ents))
		t.ents = append(t.ents, oldEnts[idx])
		t.place(s&^0xFFFF_FFFF | uint64(nidx+1))
		if l, ok := oldLogs[idx]; ok {
			t.logs[nidx] = l
		}
	}
}
