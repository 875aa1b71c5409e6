// Package conformance holds one table of steps per algorithm, shared by every
// backend that executes the algorithms: the pure Go functions, the embedded
// store and the Redis Lua scripts. A backend passes when it gives the same
// decision at every step.
//
// Steps happen at fixed instants (µs after Base) on one bucket. A step may
// carry new Params: the rule was edited just before that call.
package conformance

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/algorithm"
)

// Base is the instant the tables start at: 2023-11-15T00:00:00Z in µs, a
// whole number of days since the epoch, so windows of a second, minute,
// hour or day start exactly at Base.
const Base int64 = 1_700_006_400_000_000

// Units of the tables, in µs.
const (
	Microsecond int64 = 1
	Millisecond       = 1000 * Microsecond
	Second            = 1000 * Millisecond
	Minute            = 60 * Second
	Hour              = 60 * Minute
	Day               = 24 * Hour
)

// Step is one call and the decision every backend must give for it.
type Step struct {
	At     int64             // µs after Base
	Cost   int64             // 0 means 1
	Peek   bool              // a call of cost 0: it reads the bucket and takes nothing
	Params *algorithm.Params // if set, the rule was edited: these params from this step on

	Allowed    bool
	Reason     algorithm.Reason // checked when the call is denied
	Remaining  int64
	RetryAfter int64 // µs
	ResetAfter int64 // µs; checked unless NoReset
	NoReset    bool
}

// Case is a sequence of steps on one new bucket.
type Case struct {
	Name   string
	Params algorithm.Params
	Steps  []Step
}

// Bucket is one backend's view of a single new bucket: it applies a call at
// now (absolute µs) under p and returns the decision.
type Bucket func(p algorithm.Params, now, cost int64) (algorithm.Result, error)

// Run runs every case of every algorithm against newBucket, which must
// return a fresh, empty bucket each time it is called.
func Run(t *testing.T, newBucket func(t *testing.T) Bucket) {
	for _, k := range algorithm.Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			for _, c := range Cases(k) {
				t.Run(c.Name, func(t *testing.T) { RunCase(t, c, newBucket(t)) })
			}
		})
	}
}

// RunCase drives one case through b and reports every mismatch.
func RunCase(t *testing.T, c Case, b Bucket) {
	t.Helper()
	p := c.Params
	for i, s := range c.Steps {
		if s.Params != nil {
			p = *s.Params
		}
		cost := s.Cost
		switch {
		case s.Peek:
			cost = 0
		case cost == 0:
			cost = 1
		}
		got, err := b(p, Base+s.At, cost)
		if err != nil {
			t.Fatalf("step %d (at %s, cost %d): %v", i, fmtUS(s.At), cost, err)
		}
		want := algorithm.Result{Allowed: s.Allowed, Remaining: s.Remaining, RetryAfter: s.RetryAfter, ResetAfter: s.ResetAfter}
		if !s.Allowed {
			want.Reason = s.Reason
			if want.Reason == algorithm.ReasonNone {
				want.Reason = algorithm.ReasonLimited
			}
		}
		g := got
		g.Changed = false
		if s.NoReset {
			g.ResetAfter = want.ResetAfter
		}
		if g != want {
			t.Errorf("step %d (at %s, cost %d) = %s, want %s", i, fmtUS(s.At), cost, fmtResult(g), fmtResult(want))
		}
	}
}

func fmtUS(us int64) string { return fmt.Sprintf("+%dµs", us) }

func fmtResult(r algorithm.Result) string {
	return fmt.Sprintf("{allowed:%v reason:%q remaining:%d retry_after:%dµs reset_after:%dµs}",
		r.Allowed, r.Reason.String(), r.Remaining, r.RetryAfter, r.ResetAfter)
}

// Cases returns the conformance table of algorithm k.
func Cases(k algorithm.Kind) []Case {
	switch k {
	case algorithm.TokenBucket:
		return append(append(append([]Case(nil), tokenBucket...), tokenBucketExact...), tokenBucketCharge...)
	case algorithm.LeakyBucket:
		return append(append([]Case(nil), leakyBucket...), leakyBucketCharge...)
	case algorithm.FixedWindow:
		return append(append([]Case(nil), fixedWindow...), fixedWindowCharge...)
	case algorithm.SlidingWindow:
		return slidingWindow
	case algorithm.SlidingLog:
		return slidingLog
	}
	return nil
}

func params(k algorithm.Kind, limit, window, burst int64) algorithm.Params {
	return algorithm.Params{Kind: k, Limit: limit, Window: window, Burst: burst}
}

// charged is params of a rule whose calls are charges (Params.Charge).
func charged(k algorithm.Kind, limit, window, burst int64) algorithm.Params {
	p := params(k, limit, window, burst)
	p.Charge = true
	return p
}

func edit(k algorithm.Kind, limit, window, burst int64) *algorithm.Params {
	p := params(k, limit, window, burst)
	return &p
}
