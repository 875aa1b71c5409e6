// Package gctune keeps the garbage collector from running more often than a
// heap of a given size needs.
//
// With the default GOGC=100 the collector runs each time the heap doubles.
// A decision service keeps little live data (a few MB with the Redis store)
// but allocates a few KB per call in net/http and gRPC, so at 10,000 calls
// a second it collected every ~0.2 s; on a 2-core machine each cycle's mark
// phase takes a core for milliseconds, and the calls that arrive meanwhile
// make the p99. Floor raises the heap goal to at least floor bytes while
// the live heap is small, so the collector runs ten to fifty times less
// often, and leaves GOGC's behaviour alone once the live heap is large (the
// embedded store with millions of buckets): the goal is
// max(live×(1+GOGC/100), floor). It is the "GC tuner" of Uber's Go
// services, done with a finalizer that runs after every cycle.
//
// An operator's GOGC or GOMEMLIMIT in the environment wins: Floor then does
// nothing.
package gctune

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// maxPercent bounds the GOGC Floor sets, so that a near-empty heap does not
// get an absurd percentage.
const maxPercent = 100_000

// Tuner adjusts GOGC after every garbage collection.
type Tuner struct {
	floor   uint64
	base    int // GOGC when the live heap is above the floor
	stopped atomic.Bool
	sample  []metrics.Sample

	mu      sync.Mutex
	percent int // the GOGC in force, for tests and logs
}

// sentinel is allocated to be collected: its finalizer runs once per cycle.
// It holds a pointer so that it is not placed in the tiny allocator, whose
// blocks may outlive their objects.
type sentinel struct{ t *Tuner }

// Floor starts keeping the heap goal at least floor bytes and returns the
// Tuner, or nil when floor is 0 or GOGC or GOMEMLIMIT is set in the
// environment. Stop it when done.
func Floor(floor uint64) *Tuner {
	if floor == 0 || os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return nil
	}
	t := &Tuner{
		floor:  floor,
		base:   100,
		sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}},
	}
	t.tune()
	t.arm()
	return t
}

func (t *Tuner) arm() {
	runtime.SetFinalizer(&sentinel{t}, func(s *sentinel) {
		if s.t.stopped.Load() {
			return
		}
		s.t.tune()
		s.t.arm()
	})
}

// tune sets GOGC for the live heap the last cycle left.
func (t *Tuner) tune() {
	metrics.Read(t.sample)
	var live uint64
	if t.sample[0].Value.Kind() == metrics.KindUint64 {
		live = t.sample[0].Value.Uint64()
	}
	p := Percent(live, t.floor, t.base)
	t.mu.Lock()
	defer t.mu.Unlock()
	if p != t.percent {
		debug.SetGCPercent(p)
		t.percent = p
	}
}

// Percent returns the GOGC that puts the heap goal at
// max(live×(1+base/100), floor).
func Percent(live, floor uint64, base int) int {
	if live == 0 { // no cycle yet: nothing to go by
		return base
	}
	if live*uint64(100+base)/100 >= floor {
		return base
	}
	p := (floor - live) * 100 / live
	return int(min(p, maxPercent))
}

// GOGC returns the GOGC the tuner last set.
func (t *Tuner) GOGC() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.percent
}

// Stop stops tuning and restores GOGC=100.
func (t *Tuner) Stop() {
	if t == nil || t.stopped.Swap(true) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	debug.SetGCPercent(t.base)
	t.percent = t.base
}
