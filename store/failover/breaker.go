package failover

// The circuit breaker: while closed, the health check that a failing or
// overdue call wakes (checker), and the probes it asks (ask); while open,
// the prober that closes it again. How it decides is in the package doc
// and docs/failure.md.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/limiter"
)

// probeCall is a probe out; err is set when done is closed.
type probeCall struct {
	done chan struct{}
	err  error
}

// epoch is one closed period of the breaker: end cancels its ctx when the
// breaker opens, and ends the waits of the calls made in it.
type epoch struct {
	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	ended bool
	waits *wait // the calls out, listed through wait.prev and wait.next
}

func newEpoch() *epoch {
	ctx, cancel := context.WithCancel(context.Background())
	return &epoch{ctx: ctx, cancel: cancel}
}

// add lists w, a call out in this epoch; false when the epoch has ended.
func (e *epoch) add(w *wait) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ended {
		return false
	}
	w.next = e.waits
	if e.waits != nil {
		e.waits.prev = w
	}
	e.waits, w.listed = w, true
	return true
}

// remove takes w off the list, if it is on it.
func (e *epoch) remove(w *wait) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !w.listed {
		return
	}
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		e.waits = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	}
	w.prev, w.next, w.listed = nil, nil, false
}

// end cancels the epoch's ctx, then the waits of the calls out.
func (e *epoch) end() {
	e.cancel()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ended = true
	for w := e.waits; w != nil; {
		next := w.next
		w.prev, w.next, w.listed = nil, nil, false
		w.cancel(context.Canceled)
		w = next
	}
	e.waits = nil
}

// callerMargin is how long before the caller's deadline a call still
// waiting for the store is answered locally.
const callerMargin = 2 * time.Millisecond

// wait is the context a call to the shared store (a take or a
// reservation) runs under (see takeShared, reserveShared). It ends when
// the breaker opens (its epoch ends), when the caller's context ends, at
// the caller's own deadline less callerMargin (capped, see deadlineAt), or
// after MaxWait of this process's running time, whichever comes first,
// with the error context.WithDeadline would give; and at due, Timeout into
// the call, a call still out is overdue: the breaker probes the store.
//
// MaxWait is counted as a probe's wait is (see ask): in waitTicks ticks,
// each worth a tenth of it however late it comes. A process stopped by
// the OS (SIGSTOP, a VM's steal, a machine that gives it no CPU) sees its
// wall clock jump when it runs again, while Redis's answers wait in its
// sockets: a wall-clock bound would answer those calls locally, after
// Redis had taken their tokens. Only the caller's deadline is wall time,
// as the caller's is; it is the only deadline the wait reports, so that
// the client does not set a wall-clock deadline of MaxWait on the socket
// either.
//
// One timer serves every instant, and the epoch ends its waits from a
// list of its own, so that a call costs one timer, one registration on the
// caller's context and a few allocations, on the path of every decision.
// Values are the caller's.
type wait struct {
	parent     context.Context
	s          *Store
	e          *epoch    // the epoch of the first shard the call goes to
	ts         []target  // the shards the call goes to
	tsBuf      [2]target // ts's room for the common case
	extra      []*epoch  // the epochs of the other shards, which end it too
	stopExtra  []func() bool
	due, end   time.Time // due is Timeout after the call was made; end the capped deadline
	done       chan struct{}
	stopParent func() bool // nil when the parent never ends
	prev, next *wait       // e's list, under e.mu
	listed     bool        // under e.mu
	capped     bool        // end is the caller's deadline (deadlineAt)

	mu      sync.Mutex
	t       *time.Timer
	ops     []limiter.Op // nil once the call returned
	overdue bool         // due has passed
	tick    time.Time    // the next of MaxWait's ticks (not capped)
	ticks   int          // MaxWait's ticks seen
	err     error
}

// waitTicks is how many ticks make MaxWait.
const waitTicks = 10

// newWait is the wait of a call about ops to the shards ts of the shared
// store made now, for parent, in each shard's current epoch, ending as
// wait says. The call ends it with returned.
func (s *Store) newWait(parent context.Context, ts []target, ops []limiter.Op) *wait {
	e := ts[0].sh.opened.Load()
	now := time.Now()
	end, capped := s.deadlineAt(parent, now)
	w := &wait{parent: parent, s: s, e: e, due: now.Add(s.cfg.Timeout), end: end, capped: capped, ops: ops, done: make(chan struct{})}
	w.ts = append(w.tsBuf[:0], ts...)
	if !capped {
		w.tick = now.Add(s.cfg.MaxWait / waitTicks)
	}
	if parent.Done() != nil {
		w.stopParent = context.AfterFunc(parent, func() { w.cancel(parent.Err()) })
	}
	if !e.add(w) {
		w.cancel(context.Canceled) // the breaker opened just now
	}
	for _, t := range ts[1:] {
		other := t.sh.opened.Load()
		w.extra = append(w.extra, other)
		w.stopExtra = append(w.stopExtra, context.AfterFunc(other.ctx, func() { w.cancel(context.Canceled) }))
	}
	if capped && !now.Before(end) {
		w.cancel(context.DeadlineExceeded)
	}
	w.mu.Lock() // fire reads w.t
	w.t = time.AfterFunc(w.nextLocked().Sub(now), w.fire)
	w.mu.Unlock()
	return w
}

// opened reports whether the breaker of a shard the call went to opened
// while it waited.
func (w *wait) opened() bool {
	if w.e.ctx.Err() != nil {
		return true
	}
	for _, e := range w.extra {
		if e.ctx.Err() != nil {
			return true
		}
	}
	return false
}

// nextLocked is the next instant the wait's timer must fire at; zero for
// none. w.mu is held.
func (w *wait) nextLocked() time.Time {
	var next time.Time
	earliest := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	if !w.overdue {
		earliest(w.due)
	}
	if w.err == nil {
		if w.capped {
			earliest(w.end)
		} else {
			earliest(w.tick)
		}
	}
	return next
}

// fire runs at due, at end and at MaxWait's ticks: the call is overdue,
// or its wait ends.
func (w *wait) fire() {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ops == nil {
		return // the call returned
	}
	if !w.overdue && !now.Before(w.due) {
		w.overdue = true
		w.s.stats.Overdue.Add(1)
		w.s.suspectAll(w.ts)
	}
	if w.err == nil {
		switch {
		case w.capped && !now.Before(w.end):
			w.cancelLocked(context.DeadlineExceeded)
		case !w.capped && !now.Before(w.tick):
			// One tick, however late: the next is a tick from now.
			if w.ticks++; w.ticks >= waitTicks {
				w.cancelLocked(context.DeadlineExceeded)
			}
			w.tick = now.Add(w.s.cfg.MaxWait / waitTicks)
		}
	}
	if next := w.nextLocked(); !next.IsZero() {
		w.t.Reset(next.Sub(now))
	}
}

// finish ends the wait when the call returns: no overdue report after it.
func (w *wait) finish() {
	w.t.Stop()
	if w.stopParent != nil {
		w.stopParent()
	}
	for _, stop := range w.stopExtra {
		stop()
	}
	w.e.remove(w)
	w.mu.Lock()
	w.ops = nil
	w.mu.Unlock()
}

func (w *wait) cancel(err error) {
	w.mu.Lock()
	w.cancelLocked(err)
	w.mu.Unlock()
}

func (w *wait) cancelLocked(err error) {
	if w.err == nil {
		w.err = err
		close(w.done)
	}
}

// Deadline is the caller's own deadline less callerMargin, when it ends
// the wait; else none (MaxWait is not a wall-clock instant).
func (w *wait) Deadline() (time.Time, bool) {
	if w.capped {
		return w.end, true
	}
	return time.Time{}, false
}
func (w *wait) Done() <-chan struct{} { return w.done }
func (w *wait) Value(key any) any     { return w.parent.Value(key) }

func (w *wait) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// clientOf is the client a probe about ops asks about: the first op's.
func clientOf(ops []limiter.Op) string {
	if len(ops) == 0 {
		return "sluice-probe"
	}
	return ops[0].Client
}

// suspectAll notes, for each shard ts go to, the call's client there
// for the shard's health check (on a cluster, the shard of that client is
// the one to ask) and wakes it.
func (s *Store) suspectAll(ts []target) {
	for _, t := range ts {
		s.suspect(t.sh, t.client)
	}
}

// suspect notes client for the health check of sh and queues the check,
// unless one is queued or running.
func (s *Store) suspect(sh *shard, client string) {
	client = strings.Clone(client)
	sh.suspect.Store(&client)
	if sh.queued.CompareAndSwap(false, true) {
		select {
		case s.check <- sh:
		default:
			sh.queued.Store(false)
		}
	}
}

// count adds a call to the failure-counting window of sh, starting a new
// window every 100 ms: short, so that the successes before a fault do not
// dilute its failures.
func (sh *shard) count(now time.Time) {
	tenth := now.UnixMilli() / 100
	if w := sh.window.Load(); w != tenth && sh.window.CompareAndSwap(w, tenth) {
		sh.calls.Store(0)
		sh.fails.Store(0)
	}
	sh.calls.Add(1)
}

// checker probes a shard of the store, while its breaker is closed, each
// time a call to it failed or went overdue, and opens its breaker when the
// probe fails: the verdict on the store comes from one small read on a
// connection that carries nothing else, never from how long calls took
// inside this process. Shards are checked at once, each by a goroutine of
// its own.
func (s *Store) checker() {
	defer s.done.Done()
	var checks sync.WaitGroup
	defer checks.Wait()
	for {
		select {
		case <-s.stop:
			return
		case sh := <-s.check:
			checks.Add(1)
			go func() {
				defer checks.Done()
				defer sh.queued.Store(false)
				s.checkShard(sh)
			}()
		}
	}
}

// checkShard is the health check of sh.
func (s *Store) checkShard(sh *shard) {
	b := s.primary.Load()
	if b == nil || State(s.state.Load()) != Closed || !sh.closed() {
		return
	}
	client := "sluice-probe"
	if c := sh.suspect.Load(); c != nil {
		client = *c
	}
	// Two failed probes in a row open the breaker (two successful ones
	// close it): one late answer, on a machine whose cores are taken,
	// is not yet a Redis that is slow or gone. The second waits for
	// the first one's answer if it is still out.
	var err error
	for range 2 {
		s.stats.Probes.Add(1)
		if err = s.ask(sh, b.p, client, s.cfg.MaxWait); err == nil {
			return
		}
		s.stats.ProbesFailed.Add(1)
	}
	s.trip(sh, fmt.Errorf("a call got no answer in %v or failed, and two probes failed: %w", s.cfg.Timeout, err), client)
}

// ask probes p about client, on sh: the probe fails when it errs, or when
// it has had ProbeTimeout of this process's running time without an
// answer.
//
// Running time, not wall time: the wait is counted in ticks of a tenth of
// ProbeTimeout, each worth a tenth however late it comes. A process starved
// of CPU (its goroutines queued, or the machine's cores taken by others)
// sees its ticks late, and its clock of Redis's time runs slow by as much;
// so the probe's reply, in the socket in time but read late, is not taken
// for Redis's silence. The probe runs in a goroutine of its own with its
// own deadline, which starts there, just before it writes: Probe gets that
// long before it errs by itself (the health check while closed gives it
// MaxWait, to be lenient with a late read; the prober while open gives it
// ProbeTimeout, so that a silent connection is soon dropped). While a probe
// of sh is out, an ask waits for its answer instead of sending another:
// one probe of a shard at a time.
func (s *Store) ask(sh *shard, p Primary, client string, deadline time.Duration) error {
	c := sh.probeOut.Load()
	for c == nil {
		c = &probeCall{done: make(chan struct{})}
		if !sh.probeOut.CompareAndSwap(nil, c) {
			c = sh.probeOut.Load()
			continue
		}
		go func(c *probeCall) {
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			c.err = p.Probe(ctx, client)
			cancel()
			sh.probeOut.Store(nil)
			close(c.done)
		}(c)
	}
	slice := s.cfg.ProbeTimeout / 10
	t := time.NewTicker(slice) // real time: it measures this process's scheduling
	defer t.Stop()
	for ticks := 0; ; {
		select {
		case <-c.done:
			return c.err
		case <-t.C:
			if ticks++; ticks >= 10 {
				return fmt.Errorf("failover: probe: no answer in %v: %w", s.cfg.ProbeTimeout, context.DeadlineExceeded)
			}
		}
	}
}

// trip opens the breaker of sh (once per run of failures) and ends the
// waits of the calls out to it.
func (s *Store) trip(sh *shard, err error, client string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !sh.closed() {
		return
	}
	client = strings.Clone(client)
	sh.failing.Store(&client)
	sh.reason.Store(ptr(err.Error()))
	sh.since.Store(s.cfg.Now().UnixNano())
	sh.state.Store(int32(Open))
	s.since.Store(sh.since.Load())
	sh.opened.Load().end()
	sh.openings.Add(1)
	s.stats.Opened.Add(1)
	s.log.Warn("failover: breaker open: shared store failing; deciding locally",
		"shard", sh.name, "failures", sh.fails.Load(), "error", err, "instances", s.Instances())
}

// prober connects and probes while the store is not connected or the
// breaker of a shard is open.
func (s *Store) prober() {
	defer s.done.Done()
	tick, stop := s.cfg.Tick(s.cfg.ProbeInterval)
	defer stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick:
		}
		var down []*shard
		s.shards.each(func(sh *shard) {
			if !sh.closed() {
				down = append(down, sh)
			}
		})
		if len(down) == 0 {
			continue
		}
		b := s.connected()
		var wg sync.WaitGroup
		for _, sh := range down {
			if b == nil {
				sh.ok, sh.bad = 0, sh.bad+1
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if s.probe(sh, b) {
					sh.ok, sh.bad = sh.ok+1, 0
				} else {
					sh.ok, sh.bad = 0, sh.bad+1
				}
			}()
		}
		wg.Wait()
		for _, sh := range down {
			if sh.ok >= s.cfg.ProbeSuccesses {
				s.recover(sh)
				sh.ok, sh.bad = 0, 0
			}
		}
	}
}

// connected returns the shared store, connecting first if there is none.
func (s *Store) connected() *primaryBox {
	if b := s.primary.Load(); b != nil {
		return b
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ConnectTimeout)
	p, err := s.connect(ctx)
	cancel()
	if err != nil {
		s.log.Debug("failover: connect failed", "error", err)
		s.reason.Store(ptr(err.Error()))
		s.shards.whole.reason.Store(ptr(err.Error()))
		return nil
	}
	s.primary.Store(box(p))
	return s.primary.Load()
}

// probe asks the shared store about the client whose call failed on sh
// (so that on a cluster it is that client's shard that must answer). A
// probe that times out, or the third failed probe of a shard in a row,
// drops the connections and the next probe reconnects — when no shard of
// the store still answers (a store of one shard, or every shard of a
// cluster open): a silent, half-open connection is never trusted again,
// and a cluster client starts from a fresh topology. While other shards
// answer, their connections are kept: the client drops a silent one by
// itself (its liveness PING), and finds a promoted replica by its own
// topology refresh.
func (s *Store) probe(sh *shard, b *primaryBox) bool {
	client := "sluice-probe"
	if c := sh.failing.Load(); c != nil {
		client = *c
	}
	err := s.ask(sh, b.p, client, s.cfg.ProbeTimeout)
	if err == nil {
		return true
	}
	s.log.Debug("failover: probe failed", "shard", sh.name, "client", client, "error", err)
	sh.reason.Store(ptr(err.Error()))
	if (errors.Is(err, context.DeadlineExceeded) || sh.bad >= 2) && s.noShardAnswers() {
		s.drop(b)
	}
	return false
}

// noShardAnswers reports whether every shard's breaker is open, or the
// store has one shard and its breaker is open.
func (s *Store) noShardAnswers() bool {
	all := true
	s.shards.each(func(sh *shard) {
		if sh != s.shards.whole && sh.closed() {
			all = false
		}
	})
	return all
}

func ptr[T any](v T) *T { return &v }

// recover closes the breaker of sh. The local fallback keeps its buckets:
// a caller who used its local allowance in this outage does not get a
// fresh one in the next (its buckets refill with time, as Redis's do).
func (s *Store) recover(sh *shard) {
	s.mu.Lock()
	defer s.mu.Unlock()
	down := s.cfg.Now().Sub(time.Unix(0, sh.since.Load()))
	was := State(s.state.Load())
	if was == Closed {
		was = Open
	}
	sh.fails.Store(0)
	sh.calls.Store(0)
	sh.opened.Store(newEpoch())
	sh.state.Store(int32(Closed))
	sh.reason.Store(ptr(""))
	if State(s.state.Load()) == Connecting {
		s.setState(Closed, "")
	} else {
		s.since.Store(s.cfg.Now().UnixNano())
	}
	s.log.Info("failover: breaker closed: shared store answering",
		"shard", sh.name, "was", was.String(), "degraded_for", down.Round(time.Millisecond).String())
	s.announce()
}
