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
// reservation) runs under (see takeShared, reserveShared). It ends at
// end, when the breaker opens (its epoch ends) or when the caller's
// context ends, whichever comes first, with the error
// context.WithDeadline would give; and at due, Timeout into the call, a
// call still out is overdue: the breaker probes the store. One timer
// serves both instants, and the epoch ends its waits from a list of its
// own, so that a call costs one timer, one registration on the caller's
// context and a few allocations, on the path of every decision. Values
// are the caller's.
type wait struct {
	parent     context.Context
	s          *Store
	e          *epoch
	due, end   time.Time // due is Timeout after the call was made
	done       chan struct{}
	stopParent func() bool // nil when the parent never ends
	prev, next *wait       // e's list, under e.mu
	listed     bool        // under e.mu
	capped     bool        // end is the caller's deadline (deadlineAt)

	mu      sync.Mutex
	t       *time.Timer
	ops     []limiter.Op // nil once the call returned
	overdue bool         // due has passed
	err     error
}

// newWait is the wait of a call about ops to the shared store made now,
// for parent, in the breaker's current epoch, ending at the deadline
// deadlineAt gives. The call ends it with returned.
func (s *Store) newWait(parent context.Context, ops []limiter.Op) *wait {
	e := s.opened.Load()
	now := time.Now()
	end, capped := s.deadlineAt(parent, now)
	w := &wait{parent: parent, s: s, e: e, due: now.Add(s.cfg.Timeout), end: end, capped: capped, ops: ops, done: make(chan struct{})}
	if parent.Done() != nil {
		w.stopParent = context.AfterFunc(parent, func() { w.cancel(parent.Err()) })
	}
	if !e.add(w) {
		w.cancel(context.Canceled) // the breaker opened just now
	}
	if !now.Before(end) {
		w.cancel(context.DeadlineExceeded)
	}
	first := w.due
	if end.Before(first) {
		first = end
	}
	w.mu.Lock() // fire reads w.t
	w.t = time.AfterFunc(first.Sub(now), w.fire)
	w.mu.Unlock()
	return w
}

// fire runs at due and at end: the call is overdue, or its wait ends.
func (w *wait) fire() {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ops == nil {
		return // the call returned
	}
	var next time.Time
	if !w.overdue {
		if now.Before(w.due) {
			next = w.due
		} else {
			w.overdue = true
			w.s.stats.Overdue.Add(1)
			w.s.suspectCall(w.ops)
		}
	}
	if w.err == nil {
		if !now.Before(w.end) {
			w.cancelLocked(context.DeadlineExceeded)
		} else if next.IsZero() || w.end.Before(next) {
			next = w.end
		}
	}
	if !next.IsZero() {
		w.t.Reset(next.Sub(now))
	}
}

// finish ends the wait when the call returns: no overdue report after it.
func (w *wait) finish() {
	w.t.Stop()
	if w.stopParent != nil {
		w.stopParent()
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

func (w *wait) Deadline() (time.Time, bool) { return w.end, true }
func (w *wait) Done() <-chan struct{}       { return w.done }
func (w *wait) Value(key any) any           { return w.parent.Value(key) }

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

// suspectCall notes the call's client for the health check (on a
// cluster, its shard is the one to ask) and wakes it.
func (s *Store) suspectCall(ops []limiter.Op) {
	client := strings.Clone(clientOf(ops))
	s.suspect.Store(&client)
	select {
	case s.check <- struct{}{}:
	default:
	}
}

// count adds a call to the failure-counting window, starting a new window
// every 100 ms: short, so that the successes before a fault do not dilute
// its failures.
func (s *Store) count(now time.Time) {
	sec := now.UnixMilli() / 100
	if w := s.window.Load(); w != sec && s.window.CompareAndSwap(w, sec) {
		s.calls.Store(0)
		s.fails.Store(0)
	}
	s.calls.Add(1)
}

// checker probes the store, while the breaker is closed, each time a call
// failed or went overdue, and opens the breaker when the probe fails: the
// verdict on the store comes from one small read on a connection that
// carries nothing else, never from how long calls took inside this process.
func (s *Store) checker() {
	defer s.done.Done()
	for {
		select {
		case <-s.stop:
			return
		case <-s.check:
		}
		b := s.primary.Load()
		if b == nil || State(s.state.Load()) != Closed {
			continue
		}
		client := "sluice-probe"
		if c := s.suspect.Load(); c != nil {
			client = *c
		}
		// Two failed probes in a row open the breaker (two successful ones
		// close it): one late answer, on a machine whose cores are taken,
		// is not yet a Redis that is slow or gone. The second waits for
		// the first one's answer if it is still out.
		var err error
		for range 2 {
			s.stats.Probes.Add(1)
			if err = s.ask(b.p, client, s.cfg.MaxWait); err == nil {
				break
			}
			s.stats.ProbesFailed.Add(1)
		}
		if err != nil {
			s.trip(fmt.Errorf("a call got no answer in %v or failed, and two probes failed: %w", s.cfg.Timeout, err), client)
		}
	}
}

// ask probes p about client: the probe fails when it errs, or when it has
// had ProbeTimeout of this process's running time without an answer.
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
// is out, an ask waits for its answer instead of sending another: one probe
// at a time.
func (s *Store) ask(p Primary, client string, deadline time.Duration) error {
	c := s.probeOut.Load()
	for c == nil {
		c = &probeCall{done: make(chan struct{})}
		if !s.probeOut.CompareAndSwap(nil, c) {
			c = s.probeOut.Load()
			continue
		}
		go func(c *probeCall) {
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			c.err = p.Probe(ctx, client)
			cancel()
			s.probeOut.Store(nil)
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

// trip opens the breaker (once per run of failures) and ends the waits of
// the calls out.
func (s *Store) trip(err error, client string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if State(s.state.Load()) != Closed {
		return
	}
	client = strings.Clone(client)
	s.failing.Store(&client)
	s.setState(Open, err.Error())
	s.opened.Load().end()
	s.stats.Opened.Add(1)
	s.log.Warn("failover: breaker open: shared store failing; deciding locally",
		"failures", s.fails.Load(), "error", err, "instances", s.Instances())
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// prober connects and probes while the breaker is not closed.
func (s *Store) prober() {
	defer s.done.Done()
	tick, stop := s.cfg.Tick(s.cfg.ProbeInterval)
	defer stop()
	ok, bad := 0, 0
	for {
		select {
		case <-s.stop:
			return
		case <-s.wake:
			ok, bad = 0, 0
			continue
		case <-tick:
		}
		st := State(s.state.Load())
		if st == Closed {
			ok = 0
			continue
		}
		if s.probe(bad) {
			ok, bad = ok+1, 0
		} else {
			ok, bad = 0, bad+1
		}
		if ok >= s.cfg.ProbeSuccesses {
			s.recover()
			ok = 0
		}
	}
}

// probe connects if needed and asks the shared store about the client
// whose call failed (so that on a cluster it is that client's shard that
// must answer). A probe that times out, or the third failed probe in a row,
// drops the connections and the next probe reconnects: a silent, half-open
// connection is never trusted again, and a cluster client starts from a
// fresh topology (a promoted replica) instead of waiting for a refresh.
func (s *Store) probe(failedBefore int) bool {
	b := s.primary.Load()
	if b == nil {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ConnectTimeout)
		p, err := s.connect(ctx)
		cancel()
		if err != nil {
			s.log.Debug("failover: connect failed", "error", err)
			s.reason.Store(ptr(err.Error()))
			return false
		}
		s.primary.Store(&primaryBox{p})
		b = s.primary.Load()
	}
	client := "sluice-probe"
	if c := s.failing.Load(); c != nil {
		client = *c
	}
	if err := s.ask(b.p, client, s.cfg.ProbeTimeout); err != nil {
		s.log.Debug("failover: probe failed", "client", client, "error", err)
		s.reason.Store(ptr(err.Error()))
		if (errors.Is(err, context.DeadlineExceeded) || failedBefore >= 2) && s.primary.CompareAndSwap(b, nil) {
			b.p.Close()
		}
		return false
	}
	return true
}

func ptr[T any](v T) *T { return &v }

// recover closes the breaker and drops the local fallback state.
func (s *Store) recover() {
	s.mu.Lock()
	defer s.mu.Unlock()
	from, _ := s.State()
	down := s.cfg.Now().Sub(s.Since())
	s.fails.Store(0)
	s.calls.Store(0)
	old := s.fallback.Swap(s.newFallback())
	s.opened.Store(newEpoch())
	s.setState(Closed, "")
	old.Close()
	s.log.Info("failover: breaker closed: shared store answering; local fallback dropped",
		"was", from.String(), "degraded_for", down.Round(time.Millisecond).String())
	s.announce()
}
