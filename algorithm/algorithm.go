// Package algorithm holds sluice's five rate-limiting algorithms as pure
// functions: (params, state, now, cost) → (result, new state). They take no
// locks, do no I/O and never read the clock; the caller passes now in.
//
// Every algorithm has one definition here and a second execution in the Redis
// Lua scripts; both give the same decision for the same sequence of (time,
// cost). To keep them identical, times are integer microseconds, which Lua
// holds as doubles relative to 2020-09-13 (exact: every instant an int64 of
// ns can name, 1677…2262, plus MaxRefill, stays below 2^53 µs from there),
// the buckets are exact integer arithmetic (see token_bucket.go), and the
// few floating-point steps of the sliding window are written so that Go and
// Lua perform the same IEEE operations in the same order (explicit float64
// conversions keep the Go compiler from fusing them). Params.Check holds the
// bounds that keep every value exact; rules are validated with it.
//
// A state that is never written by an allowed call stays as it was: a denied
// call consumes nothing. The exception is a clock that went backwards. The
// window algorithms rebase their state onto the new now, so that a skewed
// clock cannot block a caller for the length of the skew. The two buckets
// store only the instant they are whole again: to them a step back reads as
// that much more debt, clamped to an empty bucket and written back, so a
// skew costs at most its own length of refill, never more than one full
// refill, and never admits a call more.
package algorithm

import (
	"errors"
	"fmt"
	"strconv"
)

// Kind names an algorithm. The zero value is TokenBucket, the default.
type Kind uint8

const (
	TokenBucket   Kind = iota // capacity burst, refilled at limit per window
	LeakyBucket               // GCRA meter: one theoretical arrival time
	FixedWindow               // counter per epoch-aligned window
	SlidingWindow             // weighted previous + current window counters
	SlidingLog                // exact log of timestamps in (now-window, now]
)

var kindNames = [...]string{"token_bucket", "leaky_bucket", "fixed_window", "sliding_window", "sliding_log"}

// Kinds returns every algorithm, in declaration order, in a slice of its
// own.
func Kinds() []Kind {
	return []Kind{TokenBucket, LeakyBucket, FixedWindow, SlidingWindow, SlidingLog}
}

// Valid reports whether k is one of the algorithms.
func (k Kind) Valid() bool { return int(k) < len(kindNames) }

// String returns the name used in rules, e.g. "token_bucket".
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("algorithm(%d)", uint8(k))
}

// ErrUnknownKind is returned by ParseKind for a name that is not an algorithm.
var ErrUnknownKind = errors.New("algorithm: unknown algorithm")

// ParseKind returns the algorithm named s; the empty string is TokenBucket.
func ParseKind(s string) (Kind, error) {
	if s == "" {
		return TokenBucket, nil
	}
	for i, n := range kindNames {
		if n == s {
			return Kind(i), nil
		}
	}
	return 0, fmt.Errorf("%w %q (want one of token_bucket, leaky_bucket, fixed_window, sliding_window, sliding_log)", ErrUnknownKind, s)
}

// MarshalText implements encoding.TextMarshaler.
func (k Kind) MarshalText() ([]byte, error) {
	if int(k) >= len(kindNames) {
		return nil, fmt.Errorf("algorithm: invalid kind %d", uint8(k))
	}
	return []byte(kindNames[k]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (k *Kind) UnmarshalText(b []byte) error {
	v, err := ParseKind(string(b))
	if err != nil {
		return err
	}
	*k = v
	return nil
}

// MaxLogLimit caps the limit of a SlidingLog rule: its state holds one
// timestamp per admitted call in the window.
const MaxLogLimit = 10000

// Bounds of Params that keep every algorithm exact (see Check).
const (
	MaxLimit = 1_000_000_000 // largest limit and burst
	// MaxFixedWindowLimit is the largest limit of a FixedWindow rule:
	// envoyproxy/ratelimit's largest requests_per_unit (a uint32). A
	// window's count is a whole number far below 2^53, so exact.
	MaxFixedWindowLimit = 1<<32 - 1
	MinWindow           = 1000                       // µs: 1 ms
	MaxWindow           = 366 * 24 * 3600 * 1000_000 // µs: 366 days
	// MaxRefill is the longest an empty token bucket may take to refill
	// (burst·window/limit), and an emptied leaky bucket to drain
	// ((burst+1)·⌈window/limit⌉): 40 × 366 days, in µs. Longer would put a
	// bucket's full-again instant past what take.lua's doubles hold exactly
	// for instants up to 2262.
	MaxRefill = 40 * MaxWindow
)

// Check reports what is wrong with p, if anything: the field ("limit",
// "window", "burst") and a message that says how to fix it. A rule is
// validated with it, so every accepted rule decides exactly at every
// instant.
func (p Params) Check() (field, msg string) {
	switch {
	case !p.Kind.Valid():
		return "algorithm", fmt.Sprintf("unknown algorithm %s", p.Kind)
	case p.Limit < 1:
		return "limit", fmt.Sprintf("must be ≥ 1, got %d", p.Limit)
	case p.Kind == FixedWindow && p.Limit > MaxFixedWindowLimit:
		return "limit", fmt.Sprintf("must be ≤ %d for fixed_window, got %d", MaxFixedWindowLimit, p.Limit)
	case p.Kind != FixedWindow && p.Limit > MaxLimit:
		return "limit", fmt.Sprintf("must be ≤ %d, got %d", MaxLimit, p.Limit)
	case p.Kind == SlidingLog && p.Limit > MaxLogLimit:
		return "limit", fmt.Sprintf("must be ≤ %d for sliding_log, which stores one timestamp per admitted call (use sliding_window for larger limits), got %d",
			MaxLogLimit, p.Limit)
	case p.Window < MinWindow:
		return "window", fmt.Sprintf("must be ≥ 1ms, got %dµs", p.Window)
	case p.Window > MaxWindow:
		return "window", fmt.Sprintf("must be ≤ 366d, got %dµs", p.Window)
	case p.Burst < 0:
		return "burst", fmt.Sprintf("must be ≥ 0 (0 = default), got %d", p.Burst)
	case p.Burst > MaxLimit:
		return "burst", fmt.Sprintf("must be ≤ %d, got %d", MaxLimit, p.Burst)
	}
	const refill = "must be at most 14640d (40 × 366d); lower burst or window, or raise limit"
	switch p.Kind {
	case TokenBucket:
		if overBound(p.Capacity(), p.Window, p.Limit, MaxRefill) {
			return "burst", fmt.Sprintf("burst × window / limit, the time an empty bucket takes to refill, is %s: %s",
				days(float64(p.Capacity())*float64(p.Window)/float64(p.Limit)), refill)
		}
	case LeakyBucket:
		if p.Capacity() > MaxRefill/p.interval() {
			return "burst", fmt.Sprintf("(burst + 1) × window / limit, the time an emptied meter takes to drain, is %s: %s",
				days(float64(p.Capacity())*float64(p.interval())), refill)
		}
	}
	return "", ""
}

// days renders µs as days, for Check's messages.
func days(us float64) string {
	return strconv.FormatFloat(us/(24*3600*1e6), 'f', 1, 64) + "d"
}

// Params are the parts of a rule an algorithm reads. Times are microseconds.
type Params struct {
	Kind   Kind
	Limit  int64 // calls per window, ≥ 1
	Window int64 // µs, ≥ 1
	// Burst is the extra allowance of the bucket algorithms; 0 means the
	// default. TokenBucket: capacity, default Limit. LeakyBucket: calls
	// tolerated on top of the conforming one, default 1. Ignored otherwise.
	Burst int64
	// Charge makes every call of cost > 0 a charge for work already done
	// (an Envoy apply_on_stream_done report): it is taken in full even
	// when it does not fit — beyond the capacity too — so that the bucket
	// goes into debt and the calls after it are denied until the debt is
	// paid back. The result then says Allowed false, ReasonLimited, and
	// RetryAfter is when a call of cost 1 passes again. A call of cost 0
	// (a check before the work) is decided as always. TokenBucket,
	// LeakyBucket and FixedWindow only (CanCharge); the others ignore it.
	// The debt a bucket owes is bounded: a token or leaky bucket's at an
	// hour beyond an empty bucket, a fixed window's count until its window
	// ends; a charge counts a cost of at most 2³⁰−1.
	Charge bool
}

// maxCharge is the largest cost a charge counts (Params.Charge): more than
// any rule's capacity (MaxLimit), and small enough that the Go and the Lua
// arithmetic of a charge stay exact. A larger cost counts as maxCharge.
const maxCharge = 1<<30 - 1

// CanCharge reports whether algorithm k takes charges into debt
// (Params.Charge). A token bucket and a leaky bucket (GCRA) owe debt as
// time, paid back at their rate; a fixed window holds the count past its
// limit until the window ends, as envoyproxy/ratelimit's counter does. A
// sliding window's estimate and a sliding log's one entry per admitted
// call have no debt that a later window pays back exactly, so they do not.
func CanCharge(k Kind) bool { return k == TokenBucket || k == LeakyBucket || k == FixedWindow }

// Capacity is the largest cost a single call can ever have and still pass.
func (p Params) Capacity() int64 {
	switch p.Kind {
	case TokenBucket:
		if p.Burst > 0 {
			return p.Burst
		}
		return p.Limit
	case LeakyBucket:
		if p.Burst > 0 {
			return p.Burst + 1
		}
		return 2
	default:
		return p.Limit
	}
}

// State is the stored state of one bucket. The zero value is a new bucket.
// Field meaning depends on the algorithm:
//
//	TokenBucket    T = the instant the bucket is full again (µs, 0 = new),
//	               A = its part past T in 1/B µs, B = the limit A counts in
//	               (see token_bucket.go)
//	LeakyBucket    T = theoretical arrival time (µs)
//	FixedWindow    T = window start (µs), A = count
//	SlidingWindow  T = current window start (µs), A = current count, B = previous count
//	SlidingLog     Log = admitted call times (µs), ascending
type State struct {
	T   int64
	A   float64
	B   float64
	Log []int64
}

// Reason says why a call was denied.
type Reason uint8

const (
	ReasonNone                Reason = iota // allowed
	ReasonLimited                           // no capacity now; RetryAfter says when
	ReasonCostExceedsCapacity               // cost larger than the bucket can ever hold; never passes
	// ReasonStoreUnavailable is not an algorithm's answer: the shared store
	// could not be asked and the rule fails closed. RetryAfter is when the
	// store is next probed.
	ReasonStoreUnavailable
	// ReasonTooManyRules is not an algorithm's answer either: the call
	// matches more rules than one atomic take applies (limiter.
	// MaxRulesPerCall), so it is denied without taking from any of them.
	// It never passes as long as the rules and the call stay as they are.
	ReasonTooManyRules
)

func (r Reason) String() string {
	switch r {
	case ReasonNone:
		return ""
	case ReasonLimited:
		return "rate_limited"
	case ReasonCostExceedsCapacity:
		return "cost_exceeds_capacity"
	case ReasonStoreUnavailable:
		return "store_unavailable"
	case ReasonTooManyRules:
		return "too_many_rules"
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Result is one algorithm's answer for one call. Durations are microseconds.
type Result struct {
	Allowed bool
	Reason  Reason
	// Remaining is how many unit-cost calls would pass right after this one.
	Remaining int64
	// ResetAfter is the time until the bucket is whole again (full quota).
	ResetAfter int64
	// RetryAfter is the time until this call could pass: 0 when allowed and
	// when it never can (ReasonCostExceedsCapacity); otherwise never earlier
	// than the first instant the same call would be allowed.
	RetryAfter int64
	// Changed reports whether the returned state differs from the input and
	// must be written back.
	Changed bool
}

// Apply runs the algorithm p.Kind for a call of cost ≥ 0 at now (µs > 0).
// A call of cost 0 reads the bucket: it is allowed unless the bucket holds
// more than the limit (a fixed window or log counted under a higher one),
// with the Remaining and ResetAfter of the bucket as it is; the stores
// write nothing for it.
// Apply never changes what s describes: the returned state may share Log's
// backing array with s, but only beyond s's length, so a caller may keep s
// and drop the result (a denied call) or the other way round — not both.
func Apply(p Params, s State, now, cost int64) (Result, State) {
	switch p.Kind {
	case LeakyBucket:
		return leakyBucket(p, s, now, cost)
	case FixedWindow:
		return fixedWindow(p, s, now, cost)
	case SlidingWindow:
		return slidingWindow(p, s, now, cost)
	case SlidingLog:
		return slidingLog(p, s, now, cost)
	default:
		var r Result
		var ns State
		tokenBucket(&p, &s, now, cost, &r, &ns)
		return r, ns
	}
}

// Step is Apply for a store's hot path, with nothing passed by value: it
// reads *p and *s, which it never changes, and writes Apply(*p, *s, now,
// cost) to *r and *ns. ns must not be s.
func Step(p *Params, s *State, now, cost int64, r *Result, ns *State) {
	if p.Kind == TokenBucket {
		tokenBucket(p, s, now, cost, r, ns)
		return
	}
	*r, *ns = Apply(*p, *s, now, cost)
}

// Idle returns how long from now until s is indistinguishable from a new
// bucket, so that a store may drop it then (the expiry of a Redis key).
func Idle(p Params, s State, now int64) int64 { return IdleOf(&p, &s, now) }

// IdleOf is Idle(*p, *s, now), with nothing copied.
func IdleOf(p *Params, s *State, now int64) int64 {
	var until int64
	switch p.Kind {
	case TokenBucket:
		if s.T == 0 {
			return 0
		}
		until = s.T // full again, rounded up to a whole µs
		if s.A > 0 {
			until++
		}
	case LeakyBucket:
		until = s.T
	case FixedWindow:
		until = s.T + p.Window
	case SlidingWindow:
		until = s.T + 2*p.Window
	case SlidingLog:
		if len(s.Log) == 0 {
			return 0
		}
		until = s.Log[len(s.Log)-1] + p.Window
	}
	if until <= now {
		return 0
	}
	return until - now
}
