//go:build !linux

package loadgen

import (
	"context"
	"time"
)

// precise is a high-resolution sleeper where the system offers one (see
// sleep_linux.go); elsewhere there is none and Go timers do.
type precise struct{}

func newPrecise() *precise { return nil }
func (p *precise) close()  {}

// sleepFor waits for d or until ctx is done and reports whether d passed.
func sleepFor(ctx context.Context, t *time.Timer, _ *precise, d time.Duration) bool {
	return timerSleep(ctx, t, d)
}
