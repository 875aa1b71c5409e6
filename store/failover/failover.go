// Package failover keeps decisions flowing when the shared counter store
// does not answer. It wraps the shared store (Redis) with a deadline on
// every call and a circuit breaker; while the breaker is open, no decision
// is sent to the shared store: rules with failure_mode: open are served from
// a coarse local limit — the rule's limit divided by the number of live
// instances, same algorithm, in an embedded store — and rules with
// failure_mode: closed deny. A background prober closes the breaker when the
// store answers again, and the local state is then dropped.
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
	"fmt"
	"log/slog"
	"strings"
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

// LocalDenier is a Primary that can decide some calls without its server:
// store/redis's exact local denial cache, which knows that a client has no
// capacity before a given instant. While the store is unavailable its
// denials still hold (nobody can give the bucket capacity back meanwhile),
// so the degraded path asks it first: a caller the shared limit had denied
// is not let through by the fresh buckets of the local fallback.
type LocalDenier interface {
	// DenyLocally reports whether a remembered denial decides the call;
	// if so it has filled res as Take would have.
	DenyLocally(ops []limiter.Op, res []algorithm.Result) (limiter.TakeInfo, bool)
}

// Config tunes a Store. Zero fields take their defaults.
type Config struct {
	// Timeout bounds every call to the shared store, so no decision waits
	// longer whatever the store does (dead, hung, half-open TCP, failing
	// over). Default 5ms: a loopback or same-zone Redis answers in well under
	// a millisecond even at load (p99 < 1 ms), so 5× that is a miss, while a
	// caller waits at most 5 ms before the local fallback answers.
	Timeout time.Duration
	// FailureThreshold is how many calls within 100 ms must fail or time
	// out — and at least a tenth of the calls then — to open the breaker. Default 5: a lone slow call does not flip the instance to the
	// fallback, a dead store (or a dead shard of a cluster) is detected
	// within five calls.
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
	cfg     Config
	connect func(ctx context.Context) (Primary, error)
	log     *slog.Logger

	onCall   atomic.Pointer[func(time.Duration, error)]
	primary  atomic.Pointer[primaryBox]
	fallback atomic.Pointer[memory.Store]
	state    atomic.Int32
	window   atomic.Int64           // the failure-counting window (Unix ms / 100)
	calls    atomic.Int64           // calls in the window
	fails    atomic.Int64           // failed calls in the window
	failing  atomic.Pointer[string] // a client whose call failed: what the probe asks about
	reason   atomic.Pointer[string]
	since    atomic.Int64 // Unix ns of the last transition
	live     atomic.Int64 // last known live instances

	mu     sync.Mutex // serializes transitions
	wake   chan struct{}
	stop   chan struct{}
	done   sync.WaitGroup
	closed atomic.Bool

	stats Stats
}

type primaryBox struct{ p Primary }

// Stats are running counts, for metrics and /readyz.
type Stats struct {
	Store, Fallback, Unavailable atomic.Int64 // decisions by source
	Errors, Timeouts             atomic.Int64 // failed calls to the shared store
	Opened                       atomic.Int64 // breaker openings
	LocalDenials                 atomic.Int64 // degraded calls the primary's exact denial cache decided
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
	s := &Store{cfg: cfg, connect: connect, log: cfg.Logger, wake: make(chan struct{}, 1), stop: make(chan struct{})}
	s.live.Store(1)
	if cfg.Instances > 0 {
		s.live.Store(int64(cfg.Instances))
	}
	s.fallback.Store(newFallback())
	s.since.Store(time.Now().UnixNano())
	if cfg.OnCall != nil {
		s.SetOnCall(cfg.OnCall)
	}

	ctx, cancel := context.WithTimeout(context.Background(), cfg.ConnectTimeout)
	p, err := connect(ctx)
	cancel()
	if err != nil {
		s.setState(Connecting, err.Error())
		s.log.Warn("failover: shared store unavailable at start; serving degraded until it answers", "error", err)
	} else {
		s.primary.Store(&primaryBox{p})
		s.setState(Closed, "")
	}
	s.done.Add(2)
	go s.prober()
	go s.announcer()
	return s
}

func newFallback() *memory.Store {
	m, err := memory.New(memory.Config{SweepInterval: 10 * time.Second})
	if err != nil {
		panic(err) // the default config is valid
	}
	return m
}

func (s *Store) setState(st State, reason string) {
	s.state.Store(int32(st))
	s.reason.Store(&reason)
	s.since.Store(time.Now().UnixNano())
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

// State returns the breaker state and, when not closed, why.
func (s *Store) State() (State, string) {
	r := s.reason.Load()
	if r == nil {
		return State(s.state.Load()), ""
	}
	return State(s.state.Load()), *r
}

// Since returns when the breaker last changed state.
func (s *Store) Since() time.Time { return time.Unix(0, s.since.Load()) }

// Instances returns the live instance count the fallback divides limits by.
func (s *Store) Instances() int { return int(s.live.Load()) }

// Stats returns the running counts.
func (s *Store) Stats() *Stats { return &s.stats }

// Primary returns the shared store, or nil while not connected.
func (s *Store) Primary() Primary {
	if b := s.primary.Load(); b != nil {
		return b.p
	}
	return nil
}

// Take implements limiter.Store.
func (s *Store) Take(ctx context.Context, ops []limiter.Op, res []algorithm.Result) (limiter.TakeInfo, error) {
	if State(s.state.Load()) == Closed {
		if b := s.primary.Load(); b != nil {
			cctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
			start := time.Now()
			info, err := b.p.Take(cctx, ops, res)
			cancel()
			if fn := s.onCall.Load(); fn != nil {
				(*fn)(time.Since(start), err)
			}
			s.count(start)
			if err == nil {
				s.stats.Store.Add(1)
				return info, nil
			}
			if ctx.Err() != nil {
				return limiter.TakeInfo{}, ctx.Err() // the caller gave up: not the store's fault
			}
			if errors.Is(err, limiter.ErrTooManyRules) {
				return limiter.TakeInfo{}, err
			}
			if errors.Is(err, limiter.ErrStoreReply) {
				// The store answered, but not readably for this call:
				// decide it as if the store were unavailable, and leave
				// the breaker to what the store's health says.
				s.stats.Errors.Add(1)
				return s.degraded(ctx, ops, res)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				s.stats.Timeouts.Add(1)
			} else {
				s.stats.Errors.Add(1)
			}
			if len(ops) > 0 {
				client := strings.Clone(ops[0].Client)
				s.failing.Store(&client)
			}
			if n := s.fails.Add(1); int(n) >= s.cfg.FailureThreshold && n*10 >= s.calls.Load() {
				s.trip(err)
			}
		}
	}
	return s.degraded(ctx, ops, res)
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

// trip opens the breaker (once per run of failures).
func (s *Store) trip(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if State(s.state.Load()) != Closed {
		return
	}
	s.setState(Open, err.Error())
	s.stats.Opened.Add(1)
	s.log.Warn("failover: breaker open: shared store failing; deciding locally",
		"failures", s.fails.Load(), "error", err, "instances", s.Instances())
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// degraded decides without the shared store: fail-closed rules deny, the
// others take from the local fallback with limits divided by the live
// instance count.
func (s *Store) degraded(ctx context.Context, ops []limiter.Op, res []algorithm.Result) (limiter.TakeInfo, error) {
	if b := s.primary.Load(); b != nil {
		if d, ok := b.p.(LocalDenier); ok {
			if info, ok := d.DenyLocally(ops, res); ok {
				s.stats.LocalDenials.Add(1)
				return info, nil
			}
		}
	}
	now := time.Now().UnixMicro()
	for i := range ops {
		if ops[i].FailClosed && !ops[i].Shadow {
			retry := s.cfg.ProbeInterval.Microseconds()
			for j := range ops {
				res[j] = algorithm.Result{Allowed: true, Remaining: 1 << 62}
			}
			res[i] = algorithm.Result{Reason: algorithm.ReasonStoreUnavailable, RetryAfter: retry, ResetAfter: retry}
			s.stats.Unavailable.Add(1)
			return limiter.TakeInfo{Now: now, Source: limiter.SourceUnavailable}, nil
		}
	}
	n := s.live.Load()
	if n < 1 {
		n = 1
	}
	var buf [limiter.MaxRulesPerCall]limiter.Op
	local := buf[:0]
	for _, op := range ops {
		op.Params = Scale(op.Params, n)
		local = append(local, op)
	}
	info, err := s.fallback.Load().Take(ctx, local, res)
	if err != nil {
		return info, fmt.Errorf("failover: local fallback: %w", err)
	}
	s.stats.Fallback.Add(1)
	info.Source = limiter.SourceLocalFallback
	return info, nil
}

// Scale returns p with its allowance divided among n instances, rounded up
// so that no instance gets nothing: limit and burst (token bucket capacity,
// leaky bucket burst+1) become ceil(x/n).
func Scale(p algorithm.Params, n int64) algorithm.Params {
	if n <= 1 {
		return p
	}
	capacity := p.Capacity()
	p.Limit = ceilDiv(p.Limit, n)
	switch p.Kind {
	case algorithm.TokenBucket:
		p.Burst = ceilDiv(capacity, n)
	case algorithm.LeakyBucket:
		// Burst counts calls beyond the first; 0 would mean the default (1).
		p.Burst = max(ceilDiv(capacity, n)-1, 1)
	}
	if p.Kind == algorithm.SlidingLog && p.Limit > algorithm.MaxLogLimit {
		p.Limit = algorithm.MaxLogLimit
	}
	return p
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// prober connects and probes while the breaker is not closed.
func (s *Store) prober() {
	defer s.done.Done()
	t := time.NewTicker(s.cfg.ProbeInterval)
	defer t.Stop()
	ok, bad := 0, 0
	for {
		select {
		case <-s.stop:
			return
		case <-s.wake:
			ok, bad = 0, 0
			continue
		case <-t.C:
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
	timeout := max(s.cfg.ProbeInterval, s.cfg.Timeout)
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
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := b.p.Probe(ctx, client); err != nil {
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
	down := time.Since(s.Since())
	s.fails.Store(0)
	s.calls.Store(0)
	old := s.fallback.Swap(newFallback())
	s.setState(Closed, "")
	old.Close()
	s.log.Info("failover: breaker closed: shared store answering; local fallback dropped",
		"was", from.String(), "degraded_for", down.Round(time.Millisecond).String())
	s.announce()
}

// announcer registers this instance in the shared store and keeps the last
// known live count through an outage.
func (s *Store) announcer() {
	defer s.done.Done()
	if s.cfg.Instances > 0 {
		return
	}
	t := time.NewTicker(s.cfg.AnnounceInterval)
	defer t.Stop()
	s.announce()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			if State(s.state.Load()) == Closed {
				s.announce()
			}
		}
	}
}

func (s *Store) announce() {
	b := s.primary.Load()
	if b == nil || s.cfg.InstanceID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(s.cfg.ProbeInterval, 100*time.Millisecond))
	defer cancel()
	if n, err := b.p.Announce(ctx, s.cfg.InstanceID, 3*s.cfg.AnnounceInterval); err == nil && n > 0 {
		if old := s.live.Swap(int64(n)); old != int64(n) {
			s.log.Info("failover: live instances", "count", n)
		}
	}
}

// Close stops the background work and closes both stores.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	close(s.stop)
	s.done.Wait()
	s.fallback.Load().Close()
	if b := s.primary.Load(); b != nil {
		return b.p.Close()
	}
	return nil
}
