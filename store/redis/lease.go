package redis

import (
	"context"
	_ "embed"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/seam/redisstore"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
)

//go:embed lease.lua
var leaseBody string

var leaseSource = codecSource + leaseBody

// Leases for hot buckets (see docs/redis.md, "Leases for hot buckets").
//
// An instance that decides a bucket often takes a batch of its tokens from
// Redis in one atomic call (lease.lua) and decides from the batch until it
// runs out or its lease ends; what is left is given back with the next
// lease of that bucket (or on Close). Leasable: token buckets whose token is
// a whole number of µs (window a multiple of limit) and fixed windows; the
// other algorithms always take one round trip per decision.
//
// Allowing from a lease is exact: its tokens were taken from the shared
// bucket before they are used, and used only within the lease's life
// (lease.lua says why that keeps a token bucket exact). Denying is
// Redis's: a lease that Redis refuses (the bucket has too few tokens) is
// remembered until enough have come back, and the calls meanwhile are
// denied locally, which is never more than the rule allows.

// Lease defaults (Config).
const (
	defaultLeaseRate = 100                    // decisions/s of one bucket on one instance
	defaultLeaseTTL  = 200 * time.Millisecond // a lease's longest life
	leaseInterval    = 100 * time.Millisecond // how often bucket rates are read
	leaseRateSlots   = 1 << 14                // buckets whose rate is counted per interval
	leaseIdle        = 5 * time.Second        // a lease entry unused this long is dropped
	leaseCallTimeout = 250 * time.Millisecond // a lease call unanswered this long fails
)

// leaseSlot is one lease in hand: tokens usable until deadline (this
// process's clock); t0 and end are Redis's (µs from EPOCH), for the give-back.
type leaseSlot struct {
	tokens   int64
	deadline time.Time
	t0, end  int64
}

// giveBack is a lease's unused tokens, sent with the bucket's next lease.
type giveBack struct{ tokens, t0, end int64 }

// bucketLease is what this instance holds of one bucket. Guarded by mu.
type bucketLease struct {
	mu       sync.Mutex
	params   algorithm.Params
	slots    []leaseSlot // in order of deadline
	back     []giveBack
	fetching chan struct{} // non-nil while a lease call is out
	fetchErr error         // the last lease call's error, for callers that waited on it
	denied   time.Time     // Redis refused a lease: deny until then
	denyRes  algorithm.Result
	deniedAt time.Time
	rate     float64 // decisions/s on this instance, last interval
	count    int64   // decisions this interval
	used     time.Time
	reset    int64     // last lease's time until the bucket is whole (µs)
	resetAt  time.Time // when reset was read
	serverAt int64     // last lease's Redis now (Unix µs)
}

// leases is a Store's lease table. Safe for concurrent use.
type leases struct {
	s      *Store
	script *rueidis.Lua
	rate   float64 // auto threshold, decisions/s
	ttl    time.Duration

	mu     sync.Mutex
	m      map[string]*bucketLease
	counts map[string]int64 // decisions of candidate buckets this interval
	at     time.Time        // start of the interval

	calls   atomic.Int64 // lease calls made
	granted atomic.Int64 // tokens leased
	given   atomic.Int64 // tokens given back
	local   atomic.Int64 // decisions made from leases
}

func newLeases(s *Store) *leases {
	l := &leases{
		s:      s,
		script: rueidis.NewLuaScript(leaseSource),
		rate:   s.cfg.LeaseRate,
		ttl:    s.cfg.LeaseTTL,
		m:      map[string]*bucketLease{},
		counts: map[string]int64{},
		at:     time.Now(),
	}
	return l
}

// leasable reports whether op's bucket can be leased: a non-shadow op,
// not a charge (Params.Charge), of a token bucket with a whole-µs token or
// of a fixed window, with a cost its bucket can hold.
func leasable(op *limiter.Op) bool {
	if op.Lease == rules.LeaseOff || op.Shadow || op.Cost <= 0 {
		return false
	}
	p := op.Params
	if p.Charge {
		// charge: after_response takes its cost in full, into debt: a
		// lease that refused it would not be that rule
		return false
	}
	switch p.Kind {
	case algorithm.TokenBucket:
		return p.Limit > 0 && p.Window%p.Limit == 0 && op.Cost <= p.Capacity()
	case algorithm.FixedWindow:
		return p.Limit > 0 && op.Cost <= p.Limit
	}
	return false
}

// lookup returns the lease entry of op's bucket when op is to be decided
// from a lease: always for LeaseOn, for LeaseAuto once this instance decides
// the bucket at the threshold rate or more; nil otherwise.
func (l *leases) lookup(key string, op *limiter.Op, now time.Time) *bucketLease {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.at) >= leaseInterval {
		l.turn(now)
	}
	b := l.m[key]
	if b == nil {
		if most, _ := l.most(op.Params); most < minLease {
			return nil
		}
		if op.Lease != rules.LeaseOn {
			n, ok := l.counts[key]
			if !ok && len(l.counts) >= leaseRateSlots {
				return nil // too many buckets this interval: the rest stay cold
			}
			n += op.Cost
			l.counts[key] = n
			if float64(n) < l.rate*leaseInterval.Seconds() {
				return nil
			}
		}
		// sized from the rate that made it hot, not from the threshold
		rate := l.rate
		if n := l.counts[key]; n > 0 {
			rate = max(rate, float64(n)/max(now.Sub(l.at).Seconds(), 0.01))
		}
		b = &bucketLease{params: op.Params, rate: rate}
		l.m[key] = b
	}
	b.count++
	b.used = now
	return b
}

// turn starts a new interval: rates are read, idle entries dropped (their
// unused tokens given back). l.mu held.
func (l *leases) turn(now time.Time) {
	secs := now.Sub(l.at).Seconds()
	l.at = now
	clear(l.counts)
	for key, b := range l.m {
		b.mu.Lock()
		b.rate = float64(b.count) / secs
		b.count = 0
		idle := now.Sub(b.used) > leaseIdle && b.fetching == nil
		var back []giveBack
		if idle {
			back = b.drain(now)
		}
		b.mu.Unlock()
		if idle {
			delete(l.m, key)
			if len(back) > 0 {
				go l.giveBackNow(key, b.params, back)
			}
		}
	}
}

// drain takes every slot out of b as give-backs. b.mu held.
func (b *bucketLease) drain(now time.Time) []giveBack {
	out := b.back
	b.back = nil
	for _, sl := range b.slots {
		if sl.tokens > 0 {
			out = append(out, giveBack{sl.tokens, sl.t0, sl.end})
		}
	}
	b.slots = b.slots[:0]
	return out
}

// expire moves the slots past their deadline to the give-backs. b.mu held.
func (b *bucketLease) expire(now time.Time) {
	n := 0
	for _, sl := range b.slots {
		if !now.Before(sl.deadline) {
			if sl.tokens > 0 {
				b.back = append(b.back, giveBack{sl.tokens, sl.t0, sl.end})
			}
			continue
		}
		b.slots[n] = sl
		n++
	}
	b.slots = b.slots[:n]
}

// tokens is what b holds in live slots. b.mu held.
func (b *bucketLease) tokens() int64 {
	var n int64
	for _, sl := range b.slots {
		n += sl.tokens
	}
	return n
}

// want is the size of the next lease: about a quarter of a lease's life of
// this instance's rate, at least 2 (and the cost), at most most's.
func (l *leases) want(b *bucketLease, cost int64) (want, least int64, ttl time.Duration) {
	most, ttl := l.most(b.params)
	rate := max(b.rate, l.rate)
	want = int64(math.Ceil(rate * ttl.Seconds() / 4))
	want = min(max(want, 2, cost), max(most, cost))
	least = max(cost, want/8)
	return want, least, ttl
}

// most is the largest lease of a bucket of p, and a lease's life: an
// eighth of the bucket's capacity and a quarter of its refill over the
// life, so that what the leases in hand can strand stays a small part of
// what the rule allows.
func (l *leases) most(p algorithm.Params) (int64, time.Duration) {
	ttl := l.ttl
	capacity := p.Capacity()
	if p.Kind == algorithm.TokenBucket {
		// no longer than a quarter of the time an empty bucket takes to fill
		ttl = min(ttl, time.Duration(capacity*(p.Window/p.Limit))*time.Microsecond/4)
	}
	ttl = max(ttl, time.Millisecond)
	refill := int64(float64(p.Limit) * float64(ttl.Microseconds()) / float64(p.Window) / 4)
	return min(capacity/8, refill), ttl
}

// minLease is the smallest lease worth having: a bucket whose leases
// would be smaller (a rule refilling fewer than 8 × 4 tokens over a
// lease's life: 160 a second at the default LeaseTTL, or of a capacity
// below 64) is never leased. Its hot callers are the denied ones, whom
// the denial cache already answers without Redis.
const minLease = 8

// take decides op from b: allowed from a slot (its tokens taken), denied
// while Redis's refusal holds, or after a lease call when b holds too few.
// It returns the slot taken from (for a give-back if the call is vetoed),
// the result and the store's clock reading.
func (l *leases) take(ctx context.Context, key string, b *bucketLease, op *limiter.Op) (algorithm.Result, int64, error) {
	for try := 0; ; try++ {
		now := time.Now()
		b.mu.Lock()
		if b.params != op.Params { // the rule was edited: its leases are void
			back := b.drain(now)
			old := b.params
			b.params, b.denied = op.Params, time.Time{}
			if len(back) > 0 {
				go l.giveBackNow(key, old, back)
			}
		}
		b.expire(now)
		for i := range b.slots {
			if sl := &b.slots[i]; sl.tokens >= op.Cost {
				sl.tokens -= op.Cost
				left := b.tokens()
				res := algorithm.Result{Allowed: true, Remaining: left, ResetAfter: b.resetAfter(now)}
				server := b.serverAt + now.Sub(b.resetAt).Microseconds()
				want, _, _ := l.want(b, op.Cost)
				if b.fetching == nil && left < want/2 && now.After(b.denied) {
					l.fetch(key, b, op.Cost, now) // in the background
				}
				b.mu.Unlock()
				l.local.Add(1)
				return res, server, nil
			}
		}
		if now.Before(b.denied) {
			res := b.denyRes
			res.RetryAfter = max(b.denied.Sub(now).Microseconds(), 1)
			res.ResetAfter = max(res.ResetAfter-now.Sub(b.deniedAt).Microseconds(), res.RetryAfter)
			server := b.serverAt + now.Sub(b.resetAt).Microseconds()
			b.mu.Unlock()
			l.local.Add(1)
			return res, server, nil
		}
		if try >= 3 {
			// Other callers took what three leases brought: denied, as
			// Redis would have denied them had it been asked a moment
			// later. Denying is never more than the rule allows.
			server := b.serverAt + now.Sub(b.resetAt).Microseconds()
			b.mu.Unlock()
			return algorithm.Result{Reason: algorithm.ReasonLimited, RetryAfter: 1000, ResetAfter: 1000}, server, nil
		}
		ch := b.fetching
		if ch == nil {
			ch = l.fetch(key, b, op.Cost, now)
		}
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return algorithm.Result{}, 0, ctx.Err()
		}
		b.mu.Lock()
		err := b.fetchErr
		b.mu.Unlock()
		if err != nil {
			return algorithm.Result{}, 0, err
		}
	}
}

// resetAfter is the last lease's reset_after, aged. b.mu held.
func (b *bucketLease) resetAfter(now time.Time) int64 {
	return max(b.reset-now.Sub(b.resetAt).Microseconds(), 0)
}

// putBack returns cost tokens, taken for a call that was then vetoed, to
// b's slot that can still use them, or to the give-backs.
func (b *bucketLease) putBack(cost int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	for i := range b.slots {
		if now.Before(b.slots[i].deadline) {
			b.slots[i].tokens += cost
			return
		}
	}
	if len(b.slots) > 0 {
		sl := b.slots[len(b.slots)-1]
		b.back = append(b.back, giveBack{cost, sl.t0, sl.end})
	}
	// no slot left (drained for a rule edit): the tokens stay charged
}

// fetch starts a lease call for b and returns the channel closed when it
// has answered. b.mu held.
func (l *leases) fetch(key string, b *bucketLease, cost int64, now time.Time) chan struct{} {
	ch := make(chan struct{})
	b.fetching = ch
	want, least, ttl := l.want(b, cost)
	back := b.back
	b.back = nil
	params := b.params
	go func() {
		// Its callers wait for it: bounded as a slow take is, so that a
		// silent connection holds the bucket's callers no longer than the
		// failover store's breaker takes to open.
		ctx, cancel := context.WithTimeout(context.Background(), leaseCallTimeout)
		defer cancel()
		sent := time.Now()
		r, err := l.call(ctx, key, params, want, least, ttl, back)
		b.mu.Lock()
		defer b.mu.Unlock()
		b.fetching = nil
		b.fetchErr = err
		defer close(ch)
		if err != nil {
			b.back = append(b.back, back...) // not given back: try with the next
			return
		}
		l.given.Add(sumBack(back))
		if params != b.params {
			if r.granted > 0 { // edited meanwhile: give it back
				b.back = append(b.back, giveBack{r.granted, r.now, r.now + r.ttl})
			}
			return
		}
		b.serverAt, b.reset, b.resetAt = r.now+epoch, r.reset, sent
		if r.granted == 0 {
			b.denied, b.deniedAt = sent.Add(time.Duration(r.retry)*time.Microsecond), sent
			b.denyRes = algorithm.Result{Reason: algorithm.ReasonLimited, Remaining: 0, ResetAfter: r.reset}
			return
		}
		l.granted.Add(r.granted)
		// Redis's now is after sent: the lease is used only before its end.
		b.slots = append(b.slots, leaseSlot{tokens: r.granted, deadline: sent.Add(time.Duration(r.ttl) * time.Microsecond), t0: r.now, end: r.now + r.ttl})
	}()
	return ch
}

func sumBack(back []giveBack) int64 {
	var n int64
	for _, g := range back {
		n += g.tokens
	}
	return n
}

// leaseReply is lease.lua's answer; times in µs (now from EPOCH).
type leaseReply struct{ now, granted, ttl, retry, reset int64 }

// call runs lease.lua: give back back, lease up to want (at least least).
func (l *leases) call(ctx context.Context, key string, p algorithm.Params, want, least int64, ttl time.Duration, back []giveBack) (leaseReply, error) {
	args := make([]string, 0, 8+3*len(back))
	// kinds as take.lua's: 1 token_bucket, 3 fixed_window
	args = append(args, l.s.scriptNow(), strconv.Itoa(int(p.Kind)+1), strconv.FormatInt(p.Limit, 10),
		strconv.FormatInt(p.Window, 10), strconv.FormatInt(p.Burst, 10), strconv.FormatInt(want, 10),
		strconv.FormatInt(least, 10), strconv.FormatInt(ttl.Microseconds(), 10))
	for _, g := range back {
		args = append(args, strconv.FormatInt(g.tokens, 10), strconv.FormatInt(g.t0, 10), strconv.FormatInt(g.end, 10))
	}
	l.calls.Add(1)
	ctx = pipelined(ctx)
	reply, err := again(ctx, 4, func() (string, error) {
		return l.script.Exec(ctx, l.s.client, []string{key}, args).ToString()
	})
	if err != nil {
		return leaseReply{}, fmt.Errorf("redis: lease of %s: %w", key, err)
	}
	if len(reply) != 40 {
		return leaseReply{}, fmt.Errorf("%w: lease reply of %d bytes, want 40", ErrReply, len(reply))
	}
	f := func(i int) int64 {
		return int64(math.Float64frombits(binary.LittleEndian.Uint64([]byte(reply[8*i : 8*i+8]))))
	}
	r := leaseReply{now: f(0), granted: f(1), ttl: f(2), retry: f(3), reset: f(4)}
	if r.granted < 0 || r.granted > want || r.ttl < 0 || r.ttl > ttl.Microseconds() {
		return leaseReply{}, fmt.Errorf("%w: lease of %d tokens for %d µs, asked %d for %d", ErrReply, r.granted, r.ttl, want, ttl.Microseconds())
	}
	return r, nil
}

// giveBackNow gives back without leasing (a dropped entry, Close).
func (l *leases) giveBackNow(key string, p algorithm.Params, back []giveBack) {
	ctx, cancel := context.WithTimeout(context.Background(), leaseCallTimeout)
	defer cancel()
	if _, err := l.call(ctx, key, p, 0, 1, time.Millisecond, back); err == nil {
		l.given.Add(sumBack(back))
	}
}

// close gives back every lease in hand.
func (l *leases) close() {
	l.mu.Lock()
	m := l.m
	l.m = map[string]*bucketLease{}
	l.mu.Unlock()
	var wg sync.WaitGroup
	for key, b := range m {
		b.mu.Lock()
		back := b.drain(time.Now())
		p := b.params
		b.mu.Unlock()
		if len(back) > 0 {
			wg.Add(1)
			go func() { defer wg.Done(); l.giveBackNow(key, p, back) }()
		}
	}
	wg.Wait()
}

// leaseStats reports the store's lease counters; zero when leases are off
// (redisstore.Leases).
func (s *Store) leaseStats() redisstore.LeaseStats {
	l := s.leases
	if l == nil {
		return redisstore.LeaseStats{}
	}
	st := redisstore.LeaseStats{Calls: l.calls.Load(), Granted: l.granted.Load(), Given: l.given.Load(), Decided: l.local.Load()}
	l.mu.Lock()
	st.Buckets = len(l.m)
	for _, b := range l.m {
		b.mu.Lock()
		st.Stranded += b.tokens() + sumBack(b.back)
		b.mu.Unlock()
	}
	l.mu.Unlock()
	return st
}

// takeLeased decides a call of which some ops are leased: those from their
// leases, the others with one script run; all or nothing. A call decided
// from leases alone (every op leased, or a leased op that denied) reports
// limiter.OriginLease; one that also went to Redis, the origin of that
// part (the store, or the local denial cache).
func (s *Store) takeLeased(ctx context.Context, ops []limiter.Op, res []algorithm.Result) (limiter.TakeInfo, error) {
	var (
		held   [limiter.MaxRulesPerCall]*bucketLease
		keys   [limiter.MaxRulesPerCall]string
		nl     int
		now    = time.Now()
		server int64
	)
	for i := range ops {
		op := &ops[i]
		if !leasable(op) {
			continue
		}
		keys[i] = s.key(op.Client, op.Rule)
		if held[i] = s.leases.lookup(keys[i], op, now); held[i] != nil {
			nl++
		}
	}
	if nl == 0 {
		return s.takeRemote(ctx, ops, res)
	}
	// Leased ops first: a denial among them vetoes the call before Redis
	// is asked for the others.
	taken := [limiter.MaxRulesPerCall]bool{}
	undo := func() {
		for i, b := range held {
			if taken[i] {
				b.putBack(ops[i].Cost)
			}
		}
	}
	for i, b := range held {
		if b == nil {
			continue
		}
		r, at, err := s.leases.take(ctx, keys[i], b, &ops[i])
		if err != nil {
			undo()
			return limiter.TakeInfo{}, err
		}
		res[i], server = r, max(server, at)
		taken[i] = r.Allowed
		if !r.Allowed {
			undo()
			for j := range ops {
				if j != i {
					res[j] = algorithm.Result{Allowed: true, Remaining: 1 << 62}
				}
			}
			return limiter.TakeInfo{Now: server, Origin: limiter.OriginLease}, nil
		}
	}
	if nl == len(ops) {
		return limiter.TakeInfo{Now: server, Origin: limiter.OriginLease}, nil
	}
	// The ops Redis decides, in a pooled buffer: arrays on the stack would
	// escape to the heap (takeRemote's slices do), 5 KB a call.
	rb := remoteBufs.Get().(*remoteBuf)
	n := 0
	defer func() {
		clear(rb.ops[:n]) // drop the strings of the ops used
		remoteBufs.Put(rb)
	}()
	rops, rres := rb.ops[:], rb.res[:]
	var idx [limiter.MaxRulesPerCall]int
	for i := range ops {
		if held[i] == nil {
			rops[n], idx[n] = ops[i], i
			n++
		}
	}
	info, err := s.takeRemote(ctx, rops[:n], rres[:n])
	if err != nil {
		undo()
		return info, err
	}
	vetoed := false
	for k := 0; k < n; k++ {
		res[idx[k]] = rres[k]
		vetoed = vetoed || (!rres[k].Allowed && !rops[k].Shadow)
	}
	if vetoed {
		undo()
	}
	return info, nil
}

// remoteBuf holds the ops of a partly leased call that go to Redis, and
// their results. takeRemote keeps neither slice past its return (a call it
// abandons leaves its own callBuf to the run, not these).
type remoteBuf struct {
	ops [limiter.MaxRulesPerCall]limiter.Op
	res [limiter.MaxRulesPerCall]algorithm.Result
}

var remoteBufs = sync.Pool{New: func() any { return new(remoteBuf) }}
