// Package ratelog logs a recurring failure at most once a second, so that
// a failing store or upstream under load costs a few log lines, not one per
// request. Each line carries "suppressed": how many were left out since the
// previous one.
package ratelog

import (
	"log/slog"
	"sync/atomic"
	"time"
)

// Interval is the least time between two lines of one Limiter.
const Interval = time.Second

// Limiter lets through at most one log line per Interval. The zero value is
// ready to use and reads the wall clock; it is safe for concurrent use and
// must not be copied after first use.
type Limiter struct {
	last       atomic.Int64 // Unix ns of the last line written; 0: none yet
	suppressed atomic.Int64 // lines left out since
}

// Warn writes msg and args at level Warn on l, with "suppressed" appended,
// unless a line went out less than Interval ago; then it only counts it.
func (s *Limiter) Warn(l *slog.Logger, msg string, args ...any) {
	if !s.allow() {
		return
	}
	l.Warn(msg, append(args, "suppressed", s.suppressed.Swap(0))...)
}

// allow reports whether a line may be written now, and counts it as
// suppressed when not.
func (s *Limiter) allow() bool {
	now := time.Now().UnixNano()
	last := s.last.Load()
	if last != 0 && now-last < int64(Interval) || !s.last.CompareAndSwap(last, now) {
		s.suppressed.Add(1)
		return false
	}
	return true
}
