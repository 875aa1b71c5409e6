// Package clocktest holds the clock tests move by hand, so that a wait of
// any length passes at once and a run does not depend on the machine's
// speed.
//
// Tests that wait use testing/synctest where it fits; this clock stays
// where synctest's fake clock does not: a bubble's time moves only while
// every goroutine in it is durably blocked, and one waiting on real I/O
// never is. Its users are such tests: store/failover's denial test runs
// against a real redis-server process, the client's Transport and Budget
// tests against real loopback HTTP servers (httptest.NewServer), and
// internal/server's helpers serve its benchmarks too (a testing.TB, which
// synctest.Test cannot wrap).
package clocktest

import (
	"context"
	"sync"
	"time"
)

// Clock is a clock that moves only when the test moves it: by Advance, Set
// or Sleep. It is safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a clock that reads t until it is moved. A monotonic reading in
// t (time.Now has one) is dropped, so that the clock's times compare by wall
// time only, as times the test builds by hand do.
func New(t time.Time) *Clock { return &Clock{t: t.Round(0)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Micros returns the clock's time in Unix microseconds, the form the memory
// store's and the Redis store's Config.Clock take.
func (c *Clock) Micros() int64 { return c.Now().UnixMicro() }

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Set moves the clock to t, forwards or backwards (dropping a monotonic
// reading, as New does).
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t.Round(0)
	c.mu.Unlock()
}

// Sleep moves the clock on by d at once and returns nil, or returns
// ctx.Err() without moving it when ctx is already done.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Advance(d)
	return nil
}
