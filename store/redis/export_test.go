package redis

import "time"

// SetBatchWait sets s's coalescing window past Config's bounds (MaxBatchWait),
// so that tests on a loaded machine can hold a window open long enough for
// every call they make to find it. Call it before the first Take.
func SetBatchWait(s *Store, d time.Duration) { s.batch.wait = d }
