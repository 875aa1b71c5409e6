// Package loadgen drives load against a rate-limit decision service and
// measures it: a pool of workers makes calls as fast as they can (closed
// loop) or at a fixed total rate (open loop), and every call's latency goes
// into a Histogram. The call itself is supplied by the caller (see Call), so
// the same engine serves the HTTP check API and, later, gRPC.
//
// At a fixed rate, latency is measured from the moment a call was scheduled
// to be sent whenever the workers were too busy to send it on time, so a
// stalled server shows up in the percentiles instead of silently slowing the
// generator down (no coordinated omission).
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Call makes one decision call and reports whether it was allowed. A non-nil
// error counts the call as an error (neither allowed nor denied). Each worker
// gets its own Call (see Config.NewCall), so a Call may keep per-worker state
// such as a random source or a buffer without locking.
type Call func(ctx context.Context) (allowed bool, err error)

// Config says how much load to generate.
type Config struct {
	// Concurrency is the number of workers, each with at most one call in
	// flight. Required, ≥ 1.
	Concurrency int
	// Duration bounds the run: no call is started after it (at a fixed
	// rate, a call due before the end may still go out up to 100 ms
	// after), and the run ends when the calls in flight then return.
	// Required, > 0.
	Duration time.Duration
	// Rate is the total calls per second across all workers; 0 means as
	// fast as the workers can go (closed loop).
	Rate float64
	// Requests, when > 0, caps the number of calls made.
	Requests int64
	// NewCall returns the Call worker i (0 ≤ i < Concurrency) uses.
	// Required.
	NewCall func(worker int) Call
	// Sleep waits for d or until ctx is done and reports whether d passed;
	// only the fixed-rate schedule's pacer calls it. nil means a real
	// timer, ending on a timerfd on Linux; tests in a synctest bubble give
	// time.Sleep, whose wait the bubble's clock passes at once.
	Sleep func(ctx context.Context, d time.Duration) bool
}

// Validate reports the first invalid field of c.
func (c *Config) Validate() error {
	switch {
	case c.Concurrency < 1:
		return fmt.Errorf("loadgen: concurrency must be ≥ 1, got %d", c.Concurrency)
	case c.Duration <= 0:
		return fmt.Errorf("loadgen: duration must be > 0, got %s", c.Duration)
	case c.Rate < 0:
		return fmt.Errorf("loadgen: rate must be ≥ 0, got %g", c.Rate)
	case c.Requests < 0:
		return fmt.Errorf("loadgen: requests must be ≥ 0, got %d", c.Requests)
	case c.NewCall == nil:
		return errors.New("loadgen: NewCall is required")
	}
	return nil
}

// Result is what a run measured.
type Result struct {
	Requests int64         // calls made: Allowed + Denied + Errors
	Allowed  int64         // calls answered allowed
	Denied   int64         // calls answered denied
	Errors   int64         // calls that failed
	FirstErr error         // the first error seen, nil if none
	Elapsed  time.Duration // from the start until the last call returned
	Latency  Histogram     // latency of every call, errors included
	// Late counts calls of a fixed-rate run that were sent more than 1 ms
	// after their slot because every worker was busy; their latency
	// includes the wait. Always 0 in a closed-loop run.
	Late int64
	// Missed counts calls of a fixed-rate run that were scheduled within
	// the duration but never sent, because the workers were still busy when
	// it ended: the generator fell behind, and the percentiles understate
	// the latency a client at that rate would have seen. Always 0 in a
	// closed-loop run.
	Missed int64
}

// PerSecond returns calls completed per second of Elapsed.
func (r *Result) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Elapsed.Seconds()
}

// Run generates load as cfg says until the duration is over, the request cap
// is reached or ctx is cancelled, then waits for the calls in flight and
// returns what it measured. Calls get ctx: cancelling it also aborts them.
// Run fails only on an invalid cfg.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	now := time.Now
	start := now()
	rn := &runner{cfg: &cfg, now: now, start: start, end: start.Add(cfg.Duration)}
	if cfg.Rate > 0 {
		rn.p = newPacer(&cfg, start, rn.end, now)
	}

	var (
		mu    sync.Mutex
		total = &Result{}
		wg    sync.WaitGroup
	)
	for w := range cfg.Concurrency {
		call := cfg.NewCall(w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rn.work(ctx, call)
			mu.Lock()
			total.merge(r)
			mu.Unlock()
		}()
	}
	if rn.p != nil {
		rn.p.run(ctx)
	}
	wg.Wait()
	total.Elapsed = now().Sub(start)
	if rn.p != nil {
		slots := cfg.slots()
		if cfg.Requests > 0 {
			slots = min(slots, cfg.Requests)
		}
		total.Missed = max(slots-total.Requests, 0)
	}
	return total, nil
}

// runner is what the workers of one Run share.
type runner struct {
	cfg        *Config
	now        func() time.Time
	start, end time.Time
	p          *pacer       // fixed rate; nil in a closed loop
	next       atomic.Int64 // closed loop: the next call's number
}

// work is one worker: it makes calls with call until the run is over for
// it or ctx is done, and returns what it measured.
func (rn *runner) work(ctx context.Context, call Call) *Result {
	r := &Result{}
	var slots chan slot
	if rn.p != nil {
		slots = make(chan slot, 1)
	}
	free := rn.start // when this worker was last free, for the pacer
	for ctx.Err() == nil {
		from, ok := rn.turn(slots, free, r)
		if !ok {
			break
		}
		allowed, err := call(ctx)
		free = rn.now()
		lat := free.Sub(from)
		if err != nil && ctx.Err() != nil {
			break // aborted by the caller: not the server's error
		}
		r.record(lat, allowed, err)
	}
	return r
}

// turn waits until the worker may send its next call and returns the
// instant the call's latency counts from; false when the run is over for
// the worker. At a fixed rate the worker, free since free, waits for a
// slot on slots and a late slot is counted in r.
func (rn *runner) turn(slots chan slot, free time.Time, r *Result) (time.Time, bool) {
	if rn.p == nil {
		k := rn.next.Add(1) - 1
		from := rn.now()
		if rn.cfg.Requests > 0 && k >= rn.cfg.Requests || !from.Before(rn.end) {
			return time.Time{}, false
		}
		return from, true
	}
	rn.p.ready <- worker{free: free, slots: slots}
	s, ok := rn.p.wait(slots)
	if !ok {
		return time.Time{}, false
	}
	// Sent now; the wait before it that was the server's counts too.
	from := rn.now().Add(-s.wait)
	if s.wait > lateAfter {
		r.Late++
	}
	return from, true
}

// record counts one call that took lat.
func (r *Result) record(lat time.Duration, allowed bool, err error) {
	r.Latency.Record(lat)
	r.Requests++
	switch {
	case err != nil:
		r.Errors++
		if r.FirstErr == nil {
			r.FirstErr = err
		}
	case allowed:
		r.Allowed++
	default:
		r.Denied++
	}
}

// A fixed-rate run's schedule is kept by one pacer: call k is due at
// start + k/Rate. The pacer takes the free worker that has waited longest,
// sleeps until the call is due (unless it is due within minSleep) and
// hands it over. One timer for the whole schedule: at high rates, a timer
// per worker cost the generator more CPU than the calls did.
//
// The latency of a call is charged from when a perfect generator would
// have sent it: its due time, or if no worker was free then, the moment
// one became free (as a real client would have waited as long: no
// coordinated omission). The generator's own delays — timer slack, a late
// handover — are not charged. A call sent up to minSleep early counts from
// when it was sent.
type pacer struct {
	cfg        *Config
	start, end time.Time
	now        func() time.Time
	sleep      func(context.Context, time.Duration) bool
	stop       func()
	ready      chan worker   // free workers, in the order they became free
	done       chan struct{} // closed when the schedule is over
}

// worker is a free worker's request for its next call.
type worker struct {
	free  time.Time   // when it became free
	slots chan<- slot // where its call goes (room for one)
}

// slot is a call handed to a worker.
type slot struct {
	// wait is how long past its due time the call waited for a free
	// worker: the server's delay, charged to the call.
	wait time.Duration
}

func newPacer(cfg *Config, start, end time.Time, now func() time.Time) *pacer {
	p := &pacer{cfg: cfg, start: start, end: end, now: now, sleep: cfg.Sleep, stop: func() {},
		ready: make(chan worker, cfg.Concurrency), done: make(chan struct{})}
	if p.sleep == nil {
		t := newSleeper()
		p.sleep, p.stop = t.sleep, t.Stop
	}
	return p
}

// wait returns the worker's next call from slots; ok is false when the
// schedule is over.
func (p *pacer) wait(slots <-chan slot) (s slot, ok bool) {
	select {
	case s = <-slots:
		return s, true
	case <-p.done:
		select {
		case s = <-slots: // handed over just before the end
			return s, true
		default:
			return slot{}, false
		}
	}
}

// run hands out the schedule's calls until it is over, the request cap is
// reached or ctx is done.
func (p *pacer) run(ctx context.Context) {
	defer p.stop()
	defer close(p.done)
	for k := int64(0); p.cfg.Requests <= 0 || k < p.cfg.Requests; k++ {
		at := p.start.Add(p.cfg.slot(k))
		if !at.Before(p.end) {
			return
		}
		var w worker
		select {
		case w = <-p.ready:
		case <-ctx.Done():
			return
		}
		t := p.now()
		if !t.Before(p.end.Add(endGrace)) || at.Sub(t) > minSleep && !p.sleep(ctx, at.Sub(t)) {
			return
		}
		// Due, and every worker busy until w.free: that wait is the
		// server's. Anything later than w.free is the pacer's.
		w.slots <- slot{wait: max(w.free.Sub(at), 0)}
	}
}

// slot returns when call k of a fixed-rate run is due, from the start.
func (c *Config) slot(k int64) time.Duration {
	return time.Duration(float64(k) * float64(time.Second) / c.Rate)
}

// slots returns the number of calls of a fixed-rate run due within the
// duration.
func (c *Config) slots() int64 {
	n := int64(math.Ceil(c.Duration.Seconds() * c.Rate))
	for n > 0 && c.slot(n-1) >= c.Duration {
		n--
	}
	for c.slot(n) < c.Duration {
		n++
	}
	return n
}

// merge adds r's counts into t (t.FirstErr wins if set).
func (t *Result) merge(r *Result) {
	t.Requests += r.Requests
	t.Allowed += r.Allowed
	t.Denied += r.Denied
	t.Errors += r.Errors
	t.Late += r.Late
	if t.FirstErr == nil {
		t.FirstErr = r.FirstErr
	}
	t.Latency.Merge(&r.Latency)
}

// endGrace is how long after the duration a fixed-rate run still sends
// calls that fell due before its end, so that timer slack on the last call
// does not count as a missed call.
const endGrace = 100 * time.Millisecond

// minSleep is the shortest wait for a call worth a sleep: a call due
// sooner goes out at once, up to minSleep early. At high rates the sleeps'
// own system calls would otherwise cost the machine more than the calls.
const minSleep = 20 * time.Microsecond

// lateAfter is how far past its slot a call may be sent before Result.Late
// counts it.
const lateAfter = time.Millisecond

// sleeper is a reusable timer, with a high-resolution one for the last
// stretch of each wait where the system has one (sleep_linux.go): the
// schedule of a fixed-rate run is only as even as its sleeps.
type sleeper struct {
	t *time.Timer
	p *precise
}

func newSleeper() *sleeper {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &sleeper{t: t, p: newPrecise()}
}

func (s *sleeper) Stop() {
	s.t.Stop()
	s.p.close()
}

// sleep waits for d or until ctx is done; it reports whether d passed.
func (s *sleeper) sleep(ctx context.Context, d time.Duration) bool {
	return sleepFor(ctx, s.t, s.p, d)
}

// timerSleep waits on t for d or until ctx is done; it reports whether d
// passed.
func timerSleep(ctx context.Context, t *time.Timer, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t.Reset(d)
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		t.Stop()
		return false
	}
}
