// Package memory is sluice's embedded bucket store: the state of every
// (client, rule) bucket held in the process's memory, decided with the pure
// functions of package algorithm. It is the default store, for a single
// instance; store/redis shares state between instances.
//
// Deciding a call on existing buckets allocates nothing. A token bucket
// takes about 90 bytes of Go heap with a 16-byte client id, so 10M buckets
// fit in under 1 GB (BenchmarkMemory).
package memory

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/limiter"
)

// Errors returned by Take.
var (
	// ErrInvalidOp: an op has a cost < 0, a limit or window < 1, an unknown
	// algorithm, or a sliding-log limit above algorithm.MaxLogLimit.
	ErrInvalidOp = errors.New("memory: invalid op")
	// ErrDuplicateOp: two ops of one call name the same (client, rule)
	// bucket; the limiter never builds such a call.
	ErrDuplicateOp = errors.New("memory: two ops of one call name the same bucket")
)

var _ limiter.Store = (*Store)(nil)

// stackOps is the number of ops a call can have before Take allocates its
// bookkeeping on the heap.
const stackOps = 8

// Store is an in-memory limiter.Store.
//
// Buckets are keyed by (client, rule) and spread over shards by client id,
// so that all the buckets of one client sit behind one lock; a call locks
// the shards of all its ops (in ascending order), reads the clock once and
// decides every op at that instant, then writes back all or nothing as
// limiter.Store requires. A bucket that has been idle long enough to be
// indistinguishable from a new one (algorithm.Idle, rounded up to whole
// seconds, plus one) is treated as new and is dropped by the next sweep.
//
// Per bucket the store keeps a 48-byte entry (client id, time, two
// counters, expiry, algorithm), 8 bytes of index per slot and the client
// id's bytes; sliding-log buckets keep their log beside. A bucket whose rule
// changed algorithm starts anew.
//
// The store holds at most Config.MaxBuckets buckets, and it never forgets
// a bucket with state to make room: that would hand its caller a fresh
// allowance (a denied caller allowed again, a flood of new ids buying back
// everybody's). A call that needs a new bucket in a shard at its share of
// the ceiling first drops full buckets (idle: they carry no state, as a
// sweep would): every one of the shard once a second, else the first full
// one among the next evictSample from where the last look stopped (a
// clock hand, so every bucket is looked at in turn). Those drops are
// counted (Evictions). When the shard holds no full bucket, the call is
// decided on its rule's overflow bucket in the shard, one per rule and
// shard that every caller without a bucket of its own shares, limited as
// one caller is (Overflows; the first is logged): the conservative answer
// for callers the store has no room to tell apart. And while that overflow
// bucket is not full, a new caller's bucket starts from its state rather
// than full, so that a caller decided on it gains nothing by getting a
// bucket of its own later. Making room allocates nothing; the drop of full
// buckets looks at each bucket of the shard at most once a second, an
// eviction at a bounded number of them.
//
// The zero value is not usable; use New. A Store is safe for concurrent use
// by multiple goroutines.
type Store struct {
	shards []shard
	mask   uint64
	seed   maphash.Seed
	clock  func() int64
	epoch  int64 // clock reading at New: the zero of expiry seconds

	maxBuckets int          // Config.MaxBuckets
	perShard   int          // the ceiling of each shard: maxBuckets/len(shards), rounded down,
	extra      uint32       // plus one for the shards below extra (the remainder)
	log        *slog.Logger // for the first overflow
	warned     atomic.Bool  // the first overflow was logged

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// shard is one lock's worth of buckets. All fields are guarded by mu.
type shard struct {
	mu        sync.Mutex
	tables    map[string]*table // by rule id
	last      [2]*table         // the tables load found last (a call's rules on one client), looked at before tables; nil if dropped
	lastAt    uint8             // the entry of last the next table found replaces
	n         int               // buckets held
	list      []*table          // the tables of tables, in the order the eviction hand visits them
	handT     int32             // the eviction hand: list[handT].ents[handI] is the next entry it looks at
	handI     int32
	evicts    uint64 // full buckets dropped for the ceiling
	overflows uint64 // ops decided on an overflow bucket (table.over)
	// reclaimed is the second (after the epoch) of the last drop of idle
	// buckets at the ceiling; one such pass per second.
	reclaimed int64
	_         [24]byte // keep shards on separate cache lines (128 bytes)
}

// slot is Take's bookkeeping for one op.
type slot struct {
	hash uint64    // of the client id: shard in the low bits, table in the high
	tab  *table    // nil: the shard had no bucket of the rule
	idx  int       // the bucket's entry in tab, -1 = none
	l    *logEntry // the bucket's log, if it is a SlidingLog bucket and so is the op
	st   algorithm.State
	over bool // decided on the overflow bucket of tab's rule (loadNew)
}

func (sl *slot) shard(mask uint64) uint32 { return uint32(sl.hash & mask) }
func (sl *slot) h() uint32                { return uint32(sl.hash >> 32) }

// New returns a Store configured by cfg (zero fields take their defaults)
// and starts its background sweeper unless cfg.SweepInterval < 0. Call Close
// to stop the sweeper.
func New(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if cfg.MaxBuckets < cfg.Shards {
		return nil, fmt.Errorf("%w: max buckets = %d, want at least one per shard (%d)", ErrInvalidConfig, cfg.MaxBuckets, cfg.Shards)
	}
	s := &Store{
		shards:     make([]shard, cfg.Shards),
		mask:       uint64(cfg.Shards - 1),
		seed:       maphash.MakeSeed(),
		clock:      cfg.Clock,
		epoch:      cfg.Clock(),
		maxBuckets: cfg.MaxBuckets,
		perShard:   cfg.MaxBuckets / cfg.Shards,
		extra:      uint32(cfg.MaxBuckets % cfg.Shards),
		log:        cfg.Logger,
	}
	for i := range s.shards {
		s.shards[i].tables = make(map[string]*table)
		s.shards[i].reclaimed = math.MinInt64
	}
	if cfg.SweepInterval > 0 {
		s.stop = make(chan struct{})
		s.done = make(chan struct{})
		go s.sweeper(cfg.SweepInterval)
	}
	return s, nil
}

// Take implements limiter.Store. The ops of one call must name distinct
// (client, rule) buckets. Client and Rule strings are copied when a bucket
// is created, so the caller may reuse their bytes after Take returns.
func (s *Store) Take(ctx context.Context, ops []limiter.Op, res []algorithm.Result) (limiter.TakeInfo, error) {
	if err := ctx.Err(); err != nil {
		return limiter.TakeInfo{}, err
	}
	n := len(ops)
	if len(res) < n {
		return limiter.TakeInfo{}, fmt.Errorf("memory: len(res) = %d, want at least len(ops) = %d", len(res), n)
	}
	switch n {
	case 0:
		return limiter.TakeInfo{Now: s.clock()}, nil
	case 1:
		return s.take1(&ops[0], &res[0])
	}

	var slotBuf [stackOps]slot
	var lockBuf [stackOps]uint32
	var slots []slot
	locks := lockBuf[:0]
	if n <= stackOps {
		slots = slotBuf[:n:n]
	} else {
		slots, locks = make([]slot, n), make([]uint32, 0, n)
	}
	for i := range ops {
		op := &ops[i]
		if !usualOp(op) {
			if err := checkOp(op); err != nil {
				return limiter.TakeInfo{}, fmt.Errorf("%w: op %d (client %q, rule %q): %v", ErrInvalidOp, i, op.Client, op.Rule, err)
			}
		}
		h := maphash.String(s.seed, op.Client)
		slots[i].hash = h
		var dup bool
		if locks, dup = insertSorted(locks, uint32(h&s.mask)); dup {
			// Another op is in this shard: two ops of one bucket have one
			// client, so one shard.
			for j := range i {
				if slots[j].hash == h && ops[j].Rule == op.Rule && ops[j].Client == op.Client {
					return limiter.TakeInfo{}, fmt.Errorf("%w: ops %d and %d (client %q, rule %q)", ErrDuplicateOp, j, i, op.Client, op.Rule)
				}
			}
		}
	}

	for _, k := range locks {
		s.shards[k].mu.Lock()
	}
	// Read under the locks, so that each bucket sees its calls' times in
	// the order they were applied.
	now := s.clock()
	sec := s.seconds(now)

	denied := false
	for i := range ops {
		op, sl := &ops[i], &slots[i]
		var in algorithm.State
		s.load(op, sl, sec, &in, slots, true)
		algorithm.Step(&op.Params, &in, now, op.Cost, &res[i], &sl.st)
		if !res[i].Allowed && !op.Shadow {
			denied = true
		}
	}

	over := false
	for i := range ops {
		op, sl, r := &ops[i], &slots[i], &res[i]
		over = over || sl.over
		switch {
		case r.Allowed && !denied && op.Cost > 0:
			// Consumed. An op of cost 0 reads its bucket and writes
			// nothing, not even a new bucket.
		case op.Params.Charge && op.Cost > 0 && (r.Allowed || r.Changed):
			// A charge is taken whatever the call's other ops say.
		case !r.Allowed && r.Changed:
			// The base state, rebased after the clock went backwards.
		default:
			// Apply left the stored state as it was (even a sliding log,
			// which it may have appended to beyond its length).
			continue
		}
		s.store(op, sl, &sl.st, now)
	}

	for _, k := range locks {
		s.shards[k].mu.Unlock()
	}
	if over {
		s.warnOverflow()
	}
	return limiter.TakeInfo{Now: now}, nil
}

// take1 is Take for a call of one op, the most common: one lock and no
// bookkeeping beyond the op's slot.
func (s *Store) take1(op *limiter.Op, r *algorithm.Result) (limiter.TakeInfo, error) {
	if !usualOp(op) {
		if err := checkOp(op); err != nil {
			return limiter.TakeInfo{}, fmt.Errorf("%w: op 0 (client %q, rule %q): %v", ErrInvalidOp, op.Client, op.Rule, err)
		}
	}
	var slots [1]slot
	sl := &slots[0]
	sl.hash = maphash.String(s.seed, op.Client)
	sh := &s.shards[sl.shard(s.mask)]
	sh.mu.Lock()
	now := s.clock() // under the lock, as Take reads it
	sec := s.seconds(now)
	var in algorithm.State
	s.load(op, sl, sec, &in, slots[:], false)
	algorithm.Step(&op.Params, &in, now, op.Cost, r, &sl.st)
	// What Take writes for a call of one op: the consumed state of an
	// allowed op of cost > 0, the rebased state of a denied one.
	if r.Allowed && op.Cost > 0 || !r.Allowed && r.Changed {
		s.store(op, sl, &sl.st, now)
	}
	sh.mu.Unlock()
	if sl.over {
		s.warnOverflow()
	}
	return limiter.TakeInfo{Now: now}, nil
}

// warnOverflow logs the first call decided on an overflow bucket.
func (s *Store) warnOverflow() {
	if !s.warned.Load() && s.warned.CompareAndSwap(false, true) {
		s.log.Warn("memory: the store reached its ceiling of buckets with none full to drop; new callers share one bucket per rule until some are full again (counted in sluice_store_overflows_total)",
			"max_buckets", s.maxBuckets)
	}
}

// usualOp reports whether op is valid as most are, in a few comparisons
// (inlined where ops are taken): when it is not, checkOp says more.
func usualOp(op *limiter.Op) bool {
	p := &op.Params
	return op.Cost >= 0 && p.Limit >= 1 && p.Window >= 1 && p.Kind < algorithm.SlidingLog
}

// checkOp reports what is wrong with op, if anything.
func checkOp(op *limiter.Op) error {
	if usualOp(op) {
		return nil
	}
	p := &op.Params
	switch {
	case op.Cost < 0:
		return fmt.Errorf("cost %d < 0", op.Cost)
	case p.Limit < 1:
		return fmt.Errorf("limit %d < 1", p.Limit)
	case p.Window < 1:
		return fmt.Errorf("window %dµs < 1", p.Window)
	case !p.Kind.Valid():
		return fmt.Errorf("unknown %v", p.Kind)
	case p.Kind == algorithm.SlidingLog && p.Limit > algorithm.MaxLogLimit:
		return fmt.Errorf("sliding_log limit %d > %d", p.Limit, algorithm.MaxLogLimit)
	}
	// Not Params.Check: the failover store's local fallback divides a
	// valid rule among instances, which may lengthen its refill a little
	// past MaxRefill; Go's int64 arithmetic is exact far beyond it.
	return nil
}

// insertSorted adds k to the ascending, duplicate-free list a, which has
// room for it, and reports whether k was there already.
func insertSorted(a []uint32, k uint32) (_ []uint32, had bool) {
	i := len(a)
	for i > 0 && a[i-1] > k {
		i--
	}
	if i > 0 && a[i-1] == k {
		return a, true
	}
	a = a[:len(a)+1]
	for j := len(a) - 1; j > i; j-- { // a few entries: no call to memmove
		a[j] = a[j-1]
	}
	a[i] = k
	return a, false
}

// load finds op's bucket, records it in sl and writes its state to *st
// (which is zero): the zero State for a bucket that is idle past its
// expiry, or of another algorithm; for one that is absent, what loadNew
// says. slots are the call's (sl among them), stepped as loadNew's. The
// caller holds the lock of op's shard.
func (s *Store) load(op *limiter.Op, sl *slot, sec int64, st *algorithm.State, slots []slot, stepped bool) {
	sh := &s.shards[sl.shard(s.mask)]
	// The calls of one or two rules on a client find their tables
	// without hashing.
	tab := sh.last[0]
	if tab == nil || tab.rule != op.Rule {
		if tab = sh.last[1]; tab == nil || tab.rule != op.Rule {
			if tab = sh.tables[op.Rule]; tab != nil {
				sh.last[sh.lastAt] = tab
				sh.lastAt ^= 1
			}
		}
	}
	sl.tab, sl.idx, sl.l, sl.over = tab, -1, nil, false
	idx := -1
	if tab != nil {
		idx = tab.find(sl.h(), op.Client)
	}
	if idx < 0 {
		s.loadNew(op, sl, sh, sec, st, slots, stepped)
		return
	}
	sl.idx = idx
	e := &tab.ents[idx]
	if e.kind != op.Params.Kind {
		return
	}
	if e.kind == algorithm.SlidingLog {
		l := tab.logs[uint32(idx)]
		sl.l = l
		if expired(e.exp, sec) {
			l.log = l.buf[:0] // idle: the same as empty
		}
		st.Log = l.ready(op.Cost)
		return
	}
	if !expired(e.exp, sec) {
		st.T, st.A, st.B = e.t, e.a, e.b
	}
}

// store writes st as the state of op's bucket, creating the bucket if load
// found none (load made room for it), or as the state of the overflow
// bucket when load decided the op on it. The caller holds the lock of op's
// shard.
func (s *Store) store(op *limiter.Op, sl *slot, st *algorithm.State, now int64) {
	exp := s.expiry(&op.Params, st, now)
	if sl.over {
		s.storeOver(op, sl, st, exp)
		return
	}
	tab, idx := sl.tab, sl.idx
	if idx < 0 {
		sh := &s.shards[sl.shard(s.mask)]
		if tab == nil {
			// An earlier op of this call may have created it.
			if tab = sh.tables[op.Rule]; tab == nil {
				tab = newTable(strings.Clone(op.Rule))
				sh.tables[tab.rule] = tab
				sh.list = append(sh.list, tab)
			}
		}
		idx = tab.insert(sl.h(), strings.Clone(op.Client))
		sh.n++
		sl.tab, sl.idx = tab, idx // not to be dropped for a later op of the call
	}
	e := &tab.ents[idx]
	if op.Params.Kind != algorithm.SlidingLog {
		if e.kind == algorithm.SlidingLog { // the rule was SlidingLog
			delete(tab.logs, uint32(idx))
		}
		// Field by field: the client id stays, without a write barrier.
		e.t, e.a, e.b, e.exp, e.kind = st.T, st.A, st.B, exp, op.Params.Kind
		return
	}
	if l := sl.l; l != nil {
		l.keep(st.Log)
	} else {
		if tab.logs == nil {
			tab.logs = make(map[uint32]*logEntry)
		}
		tab.logs[uint32(idx)] = &logEntry{log: st.Log, buf: st.Log[:cap(st.Log)]}
	}
	*e = entry{client: e.client, exp: exp, kind: algorithm.SlidingLog}
}

// ready returns l's log with room to append cost entries in its array
// when the array has it, moving the log to the array's start if need be.
func (l *logEntry) ready(cost int64) []int64 {
	if cap(l.log)-len(l.log) < int(cost) && cap(l.buf)-len(l.log) >= int(cost) {
		l.log = l.buf[:copy(l.buf, l.log)]
	}
	return l.log
}

// keep records log, the bucket's log after a step from l.log, as l's.
func (l *logEntry) keep(log []int64) {
	l.log = log
	if !sameArray(log, l.buf) && cap(log) > 0 {
		l.buf = log[:cap(log)] // Apply moved the log to a new array
	}
}

// sameArray reports whether a and b are slices of one array that end at
// its end, as every slice of a logEntry's buf does.
func sameArray(a, b []int64) bool {
	ca, cb := cap(a), cap(b)
	return ca > 0 && cb > 0 && &a[:ca][ca-1] == &b[:cb][cb-1]
}

// seconds is now in whole seconds after the epoch, rounded down.
func (s *Store) seconds(now int64) int64 {
	d := now - s.epoch
	if d < 0 {
		return -((-d + 999_999) / 1_000_000)
	}
	return d / 1_000_000
}

// expired reports whether a bucket whose expiry is exp is idle at sec.
// math.MaxUint32 is never: a bucket written at an instant more than 136
// years past the epoch (a clock far in the future) keeps its state rather
// than reading as new.
func expired(exp uint32, sec int64) bool {
	return exp != math.MaxUint32 && int64(exp) <= sec
}

// expiry is the first second after the epoch at which a bucket in state st
// under p, written at now, is idle: algorithm.Idle rounded up, plus one
// second of margin; math.MaxUint32 (never) past what a uint32 holds.
func (s *Store) expiry(p *algorithm.Params, st *algorithm.State, now int64) uint32 {
	d := now + algorithm.IdleOf(p, st, now) - s.epoch
	if d <= 0 {
		return 1
	}
	sec := (d+999_999)/1_000_000 + 1
	if sec > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(sec)
}

// Len returns the number of buckets held, idle ones not yet swept included.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}

// MaxBuckets returns the ceiling on the number of buckets (Config.MaxBuckets).
func (s *Store) MaxBuckets() int { return s.maxBuckets }

// Evictions returns the number of buckets dropped so far to keep the store
// under its ceiling: all of them full (idle), so that no decision changed
// (idle buckets dropped by sweeps are not counted).
func (s *Store) Evictions() uint64 {
	var n uint64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.evicts
		sh.mu.Unlock()
	}
	return n
}

// Overflows returns the number of ops decided so far on an overflow
// bucket: new callers of a shard at its ceiling with no full bucket to
// drop, who share one bucket per rule (see Store).
func (s *Store) Overflows() uint64 {
	var n uint64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.overflows
		sh.mu.Unlock()
	}
	return n
}

// Close stops the background sweeper. The Store stays usable; Close is
// idempotent and always returns nil.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if s.stop != nil {
			close(s.stop)
			<-s.done
		}
	})
	return nil
}
