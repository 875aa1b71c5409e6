// Package failover keeps decisions flowing when the shared counter store
// does not answer. It wraps the shared store (Redis) in a circuit breaker;
// while the breaker is open, no decision is sent to the shared store: rules
// with failure_mode: open are served from a coarse local limit — the rule's
// limit divided by the number of live instances, same algorithm, in an
// embedded store — and rules with failure_mode: closed deny. A background
// prober closes the breaker when the store answers again, and the local
// state is then dropped.
//
// The breaker tells "the store is slow or gone" from "this process is
// busy": a call's own time — which includes this process's queues — never
// opens it. A call that fails, or has no answer after Config.Timeout, makes
// the breaker probe the store on a connection of its own (Primary.Probe);
// the breaker opens when that probe and the next fail or have no answer
// within Config.ProbeTimeout, or when calls fail with errors (never with
// timeouts) at a rate no busy process causes. Until then a call waits for
// the store's answer; when the breaker opens, every waiting call is
// answered locally at once.
//
// The breaker is kept per shard when the Primary has shards (a method
// Shard(client string) string naming the shard that serves a client, as a
// Redis Cluster store has for its masters): a shard that fails sends only
// its own callers to the local fallback. The local fallback keeps its
// buckets across openings, so a caller does not get a fresh local
// allowance at each.
//
// Worst-case over-admission while degraded: each of N instances admits up to
// ceil(burst/N) calls at once and ceil(limit/N) per window, so the fleet
// together admits at most one extra burst plus limit per window (plus N for
// rounding) on top of what the shared bucket had already granted — and more
// if N is stale (instances that joined during the outage are not counted).
package failover

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store/memory"
)

// Primary is what failover needs of the shared store.
type Primary interface {
	limiter.Store
	// Probe reports whether the store answers for client's buckets (on a
	// cluster: whether the shard serving that client answers).
	Probe(ctx context.Context, client string) error
	// Announce registers this instance as live for ttl and returns how many
	// instances are live.
	Announce(ctx context.Context, id string, ttl time.Duration) (int, error)
	Close() error
}

// LocalDenier decides some calls without the shared store: store/redis's
// exact denial cache, which knows that a client has no capacity before a
// given instant. While the store is unavailable its denials still hold
// (nobody can give the bucket capacity back meanwhile), so the degraded
// path asks it first: a caller the shared limit had denied is not let
// through by the fresh buckets of the local fallback. It must outlive the
// Primary (one cache given to every Primary connect makes), so that no
// reconnect forgets a denial.
type LocalDenier interface {
	// DenyLocally reports whether a remembered denial decides the call at
	// now; if so it has filled res as Take would have.
	DenyLocally(ops []limiter.Op, res []algorithm.Result, now time.Time) (limiter.TakeInfo, bool)
}

// Config tunes a Store. Zero fields take their defaults.
type Config struct {
	// Timeout is how long a call to the shared store may go unanswered
	// before the breaker probes the store (see ProbeTimeout). It does not
	// end the call: a call waits for the store's answer until the breaker
	// opens (then it is answered locally at once) or for MaxWait. Default
	// 5ms: a loopback or same-zone Redis answers in well under a
	// millisecond even at load (p99 < 1 ms), so 5× that is worth a probe.
	Timeout time.Duration
	// ProbeTimeout is how long a probe may go unanswered before it counts
	// as failed: two failed probes in a row open the breaker.
	// Default 100ms: a Redis that cannot answer one small read on an idle
	// connection in 100 ms is slow or gone, while this process's own queues
	// delay that answer by a few milliseconds even when saturated. A caller
	// waits at most about Timeout + 2×ProbeTimeout when the store hangs.
	ProbeTimeout time.Duration
	// MaxWait bounds a call to the shared store that the probes say is
	// answering: past it the call is answered locally and makes the breaker
	// probe again. It is this process's running time (ten ticks, each worth
	// a tenth however late), so that a process the OS stopped does not
	// answer locally calls Redis decided meanwhile. Default 1s (rueidis
	// drops a connection silent that long).
	// A caller's own deadline, when sooner, ends the wait 2 ms before it.
	MaxWait time.Duration
	// FailureThreshold is how many calls within 100 ms must fail with an
	// error — and at least a tenth of the calls then — to open the breaker
	// whatever the probes say (a store that answers reads but fails every
	// decision). Default 5. Calls that are merely slow never count.
	FailureThreshold int
	// ProbeInterval is how often an open breaker probes the store, and the
	// Retry-After of fail-closed denials meanwhile. Default 250ms.
	ProbeInterval time.Duration
	// ProbeSuccesses is how many probes in a row must succeed to close the
	// breaker. Default 2: recovery is declared within ~0.5 s of the store
	// answering, and a store that answers one probe and dies does not flap
	// the decisions back and forth.
	ProbeSuccesses int
	// InstanceID names this instance in the live-instance registry.
	InstanceID string
	// Instances, when > 0, fixes the number of live instances instead of
	// counting them in the shared store (--instances).
	Instances int
	// AnnounceInterval is how often this instance announces itself; entries
	// expire after 3× that. Default 2s.
	AnnounceInterval time.Duration
	// ConnectTimeout bounds each attempt to connect. Default 2s.
	ConnectTimeout time.Duration
	// Logger gets one line per breaker transition, never one per call.
	Logger *slog.Logger
	// OnCall, when set, is told the duration and error of every call to the
	// shared store (for metrics). It must not block. SetOnCall changes it.
	OnCall func(d time.Duration, err error)
	// Denials, when set, is asked first while the store is unavailable
	// (see LocalDenier). Give it the cache the Primaries share.
	Denials LocalDenier
	// Now is the clock of the breaker (its failure-counting window, the
	// time of transitions), of the denials asked while degraded and, when
	// set, of the local fallback's buckets. Default time.Now (and the
	// memory store's own clock for the fallback). The waits themselves — a
	// call's deadlines, a probe's ticks — run on real time: they measure
	// how Redis and this process behave now.
	Now func() time.Time
	// Tick makes the tickers the prober and the announcer wait on: it
	// returns the tick channel and a function that stops it. Default
	// time.NewTicker(d). Tests pass a channel they send on.
	Tick func(d time.Duration) (<-chan time.Time, func())
}

// State of the breaker.
type State int32

const (
	Closed     State = iota // decisions go to the shared store
	Open                    // the store is failing: decisions are local, probes run
	Connecting              // never connected yet: decisions are local, connecting
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case Connecting:
		return "connecting"
	}
	return "unknown"
}

// Store is a limiter.Store over a shared Primary with a local fallback. Safe
// for concurrent use; use New.
type Store struct {
	cfg      Config
	connect  func(ctx context.Context) (Primary, error)
	log      *slog.Logger
	memClock func() int64 // the fallback's clock; nil: the memory store's default

	onCall   atomic.Pointer[func(time.Duration, error)]
	primary  atomic.Pointer[primaryBox]
	fallback *memory.Store
	state    atomic.Int32 // Closed, or Connecting before the first connection
	reason   atomic.Pointer[string]
	since    atomic.Int64 // Unix ns of the last transition
	live     atomic.Int64 // last known live instances
	shards   shards       // the breakers, one per shard
	check    chan *shard  // the shards whose health check is due

	refundsBefore atomic.Int64 // RefundErrors of the Primaries dropped
	runsBefore    atomic.Int64 // ScriptRuns of the Primaries dropped: runs
	keysBefore    atomic.Int64 // and keys

	mu     sync.Mutex // serializes transitions
	stop   chan struct{}
	done   sync.WaitGroup
	closed atomic.Bool

	stats Stats
}

type primaryBox struct {
	p       Primary
	sharder sharder // p's, when it has shards
}

func box(p Primary) *primaryBox {
	b := &primaryBox{p: p}
	b.sharder, _ = p.(sharder)
	return b
}

// Stats are running counts, for metrics and /readyz.
type Stats struct {
	Store, Fallback, Unavailable atomic.Int64 // decisions by source
	Errors                       atomic.Int64 // calls to the shared store that failed
	Overdue                      atomic.Int64 // calls unanswered after Timeout (each made the breaker probe)
	Probes, ProbesFailed         atomic.Int64 // health probes made while closed, and those that failed
	Opened                       atomic.Int64 // breaker openings
	LocalDenials                 atomic.Int64 // degraded calls the exact denial cache decided
}

var _ limiter.Store = (*Store)(nil)

// New returns a Store that connects with connect. If the first attempt
// fails, New still returns (the store starts degraded, in state Connecting)
// and keeps trying in the background; it never blocks longer than
// ConnectTimeout.
func New(connect func(ctx context.Context) (Primary, error), cfg Config) *Store {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Millisecond
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = 100 * time.Millisecond
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = time.Second
	}
	if cfg.FailureThreshold <= 0 {
		cfg.FailureThreshold = 5
	}
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = 250 * time.Millisecond
	}
	if cfg.ProbeSuccesses <= 0 {
		cfg.ProbeSuccesses = 2
	}
	if cfg.AnnounceInterval <= 0 {
		cfg.AnnounceInterval = 2 * time.Second
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	var memClock func() int64
	if now := cfg.Now; now != nil {
		memClock = func() int64 { return now().UnixMicro() }
	} else {
		cfg.Now = time.Now
	}
	if cfg.Tick == nil {
		cfg.Tick = func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		}
	}
	s := &Store{cfg: cfg, connect: connect, log: cfg.Logger, memClock: memClock,
		check: make(chan *shard, maxShards+1), stop: make(chan struct{})}
	s.shards.whole = newShard(wholeShard)
	s.live.Store(1)
	if cfg.Instances > 0 {
		s.live.Store(int64(cfg.Instances))
	}
	s.fallback = s.newFallback()
	s.since.Store(cfg.Now().UnixNano())
	if cfg.OnCall != nil {
		s.SetOnCall(cfg.OnCall)
	}

	ctx, cancel := context.WithTimeout(context.Background(), cfg.ConnectTimeout)
	p, err := connect(ctx)
	cancel()
	if err != nil {
		s.setState(Connecting, err.Error())
		whole := s.shards.whole
		whole.reason.Store(ptr(err.Error()))
		whole.since.Store(s.since.Load())
		whole.state.Store(int32(Open))
		s.log.Warn("failover: shared store unavailable at start; serving degraded until it answers", "error", err)
	} else {
		s.primary.Store(box(p))
		s.setState(Closed, "")
	}
	s.done.Add(3)
	go s.prober()
	go s.checker()
	go s.announcer()
	return s
}

func (s *Store) setState(st State, reason string) {
	s.state.Store(int32(st))
	s.reason.Store(&reason)
	s.since.Store(s.cfg.Now().UnixNano())
}

// SetOnCall sets the function told about every call to the shared store
// (nil: none).
func (s *Store) SetOnCall(fn func(d time.Duration, err error)) {
	if fn == nil {
		s.onCall.Store(nil)
		return
	}
	s.onCall.Store(&fn)
}

// State returns the breaker state and, when not closed, why: Connecting
// before the store was first reached; Open while the breaker of any shard
// is open (the reason names the shard on a cluster); else Closed.
func (s *Store) State() (State, string) {
	if State(s.state.Load()) == Connecting {
		return Connecting, *s.reason.Load()
	}
	st, reason := Closed, ""
	s.shards.each(func(sh *shard) {
		if st == Closed && !sh.closed() {
			st = Open
			if r := sh.reason.Load(); r != nil {
				reason = *r
			}
			if sh != s.shards.whole {
				reason = "shard " + sh.name + ": " + reason
			}
		}
	})
	return st, reason
}

// Since returns when the breaker last changed state.
func (s *Store) Since() time.Time { return time.Unix(0, s.since.Load()) }

// Instances returns the live instance count the fallback divides limits by.
func (s *Store) Instances() int { return int(s.live.Load()) }

// Stats returns the running counts.
func (s *Store) Stats() *Stats { return &s.stats }

// BreakerState names the breaker's state (State.String): "closed", "open"
// or "connecting".
func (s *Store) BreakerState() string { st, _ := s.State(); return st.String() }

// BreakerCounts returns the running counts of the breaker: its openings,
// the calls overdue, the probes made while closed and those that failed.
func (s *Store) BreakerCounts() (openings, overdue, probes, probesFailed int64) {
	return s.stats.Opened.Load(), s.stats.Overdue.Load(), s.stats.Probes.Load(), s.stats.ProbesFailed.Load()
}

// LocalDenials returns how many calls Config.Denials denied without a round
// trip, when it counts them (a Hits method, as store/redis's cache has);
// else 0.
func (s *Store) LocalDenials() int64 {
	if c, ok := s.cfg.Denials.(interface{ Hits() int64 }); ok {
		return c.Hits()
	}
	return 0
}

// RefundErrors returns how many of the shared store's cross-shard
// give-backs failed (a RefundErrors method, as store/redis's has), over
// every Primary connect made; else 0.
func (s *Store) RefundErrors() int64 {
	n := s.refundsBefore.Load()
	if p, ok := s.Primary().(interface{ RefundErrors() int64 }); ok {
		n += p.RefundErrors()
	}
	return n
}

// ScriptRuns returns how many script runs the shared store sent to Redis
// and the keys they decided (a ScriptRuns method, as store/redis's has),
// over every Primary connect made; else 0, 0.
func (s *Store) ScriptRuns() (runs, keys int64) {
	runs, keys = s.runsBefore.Load(), s.keysBefore.Load()
	if p, ok := s.Primary().(interface{ ScriptRuns() (int64, int64) }); ok {
		r, k := p.ScriptRuns()
		runs, keys = runs+r, keys+k
	}
	return runs, keys
}

// drop closes b, the shared store, when it is still the one in use: the
// next probe connects anew.
func (s *Store) drop(b *primaryBox) {
	if !s.primary.CompareAndSwap(b, nil) {
		return
	}
	if p, ok := b.p.(interface{ RefundErrors() int64 }); ok {
		s.refundsBefore.Add(p.RefundErrors())
	}
	if p, ok := b.p.(interface{ ScriptRuns() (int64, int64) }); ok {
		r, k := p.ScriptRuns()
		s.runsBefore.Add(r)
		s.keysBefore.Add(k)
	}
	b.p.Close()
}

// ErrorKind names an error of the shared store as the Primary does (an
// ErrorKind method, as store/redis's has), or says "".
func (s *Store) ErrorKind(err error) string {
	if p, ok := s.Primary().(interface{ ErrorKind(error) string }); ok {
		return p.ErrorKind(err)
	}
	return ""
}

// Primary returns the shared store, or nil while not connected.
func (s *Store) Primary() Primary {
	if b := s.primary.Load(); b != nil {
		return b.p
	}
	return nil
}

// Take implements limiter.Store.
func (s *Store) Take(ctx context.Context, ops []limiter.Op, res []algorithm.Result) (limiter.TakeInfo, error) {
	var buf [2]target
	down := s.shards.whole
	if State(s.state.Load()) == Closed {
		if b := s.primary.Load(); b != nil {
			ts := s.targets(b, ops, buf[:0])
			down = open(ts)
			if down == nil {
				if info, err, decided := s.takeShared(ctx, b.p, ts, ops, res); decided {
					return info, err
				}
				if down = open(ts); down == nil {
					down = ts[0].sh
				}
			}
		}
	}
	return s.degraded(ctx, down, ops, res)
}

// takeShared asks the shared store, whose shards ts the call goes to;
// decided is false when the call is to be answered locally (it failed, or
// the breaker opened while it waited).
func (s *Store) takeShared(ctx context.Context, p Primary, ts []target, ops []limiter.Op, res []algorithm.Result) (info limiter.TakeInfo, err error, decided bool) {
	w := s.newWait(ctx, ts, ops)
	info, err = p.Take(w, ops, res)
	if err, decided = s.returned(w, err); err != nil || !decided {
		return limiter.TakeInfo{}, err, decided
	}
	return info, nil, true
}

// returned ends w, the wait of a call to the shared store (a take or a
// reservation) that returned err: it tells OnCall and the breakers of the
// call's shards about the call, and says what the caller gets. decided is
// false when the call is to be decided as while the store is unavailable
// (it failed, or a breaker opened while it waited); else err is the
// caller's (nil: the store's answer stands).
func (s *Store) returned(w *wait, err error) (error, bool) {
	took := time.Since(w.due) + s.cfg.Timeout
	w.finish()
	s.called(w.ts, took, err)
	if err == nil {
		return nil, true
	}
	if callerGone(w.parent, err, w.capped) {
		return w.parent.Err(), true // the caller gave up: not the store's fault
	}
	if errors.Is(err, limiter.ErrTooManyRules) || errors.Is(err, algorithm.ErrReserveKind) || errors.Is(err, limiter.ErrReserveUnsupported) {
		return err, true // the call's, not the store's
	}
	if errors.Is(err, limiter.ErrStoreReply) {
		// The store answered, but not readably for this call: decide it
		// as if the store were unavailable, and leave the breaker to what
		// the store's health says.
		s.stats.Errors.Add(1)
		return nil, false
	}
	if w.opened() {
		return nil, false // the breaker opened while it waited
	}
	s.stats.Errors.Add(1)
	s.suspectAll(w.ts)
	if timedOut(err) {
		return nil, false // the wait ended: time is the probe's to judge
	}
	if len(w.ts) == 1 {
		// A call to several shards failed on one of them, which the
		// probes tell: the error rate is counted per shard.
		s.failed(w.ts[0], err)
	}
	return nil, false
}

// deadlineAt is when a call to the shared store made at now stops
// waiting: after MaxWait, or callerMargin before the caller's own deadline
// (Envoy's filter timeout arrives as one), and then capped is true: a
// local answer beats the error the caller would get, which a proxy may
// turn into "allow".
func (s *Store) deadlineAt(ctx context.Context, now time.Time) (end time.Time, capped bool) {
	end = now.Add(s.cfg.MaxWait)
	if dl, ok := ctx.Deadline(); ok && dl.Add(-callerMargin).Before(end) {
		return dl.Add(-callerMargin), true
	}
	return end, false
}

// called counts a call to the shared store's shards ts that took took and
// ended in err: the OnCall hook, the calls of the breakers' windows, and a
// success.
func (s *Store) called(ts []target, took time.Duration, err error) {
	if fn := s.onCall.Load(); fn != nil {
		(*fn)(took, err)
	}
	now := s.cfg.Now()
	for _, t := range ts {
		t.sh.count(now)
	}
	if err == nil {
		s.stats.Store.Add(1)
	}
}

// callerGone reports whether a call to the shared store that failed with
// err ended because the caller gave up, not because the store failed: the
// caller's context ended, and not at the deadline deadlineAt capped.
func callerGone(ctx context.Context, err error, capped bool) bool {
	ours := capped && timedOut(err) && !errors.Is(ctx.Err(), context.Canceled)
	return ctx.Err() != nil && !ours
}

// failed counts a failure of the shard t of the shared store, and trips
// its breaker when FailureThreshold failures make at least a tenth of the
// window's calls.
func (s *Store) failed(t target, err error) {
	if n := t.sh.fails.Add(1); int(n) >= s.cfg.FailureThreshold && n*10 >= t.sh.calls.Load() {
		s.trip(t.sh, err, t.client)
	}
}

// timedOut reports whether err is the end of a wait: the context's
// deadline, or the socket's when the client set it from the context.
func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)
}

// Close stops the background work and closes both stores.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	close(s.stop)
	s.done.Wait()
	s.fallback.Close()
	if b := s.primary.Load(); b != nil {
		return b.p.Close()
	}
	return nil
}
