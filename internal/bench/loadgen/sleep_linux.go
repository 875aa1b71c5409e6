package loadgen

import (
	"context"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// A Go timer wakes an idle process through the netpoller, whose wait has a
// millisecond granularity: on the project's machine time.Sleep(20µs)
// returned after 1.01 ms at the median. A fixed-rate schedule of 10,000
// calls a second then goes out as bursts of ten every millisecond, and the
// server's queue for each burst, not the server, makes the p99.
//
// A timerfd (timerfd_create(2)) is a kernel high-resolution timer that the
// netpoller watches like a socket: the sleeping goroutine parks without
// holding a thread or a P, and the expiry wakes the netpoller at once.
// (nanosleep(2) on a locked thread was as precise, but held a P through
// every sleep, which starved gRPC's transport goroutines.)

// fine is the part of a wait left to the timerfd; the rest, which ctx may
// cut short, is a Go timer's.
const fine = 2 * time.Millisecond

// precise sleeps on a timerfd.
type precise struct {
	fd int
	f  *os.File
}

// newPrecise returns a timerfd sleeper, or nil when none can be made (the
// caller then uses Go timers alone).
func newPrecise() *precise {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil
	}
	// A non-blocking descriptor: os.NewFile registers it with the
	// netpoller, so Read parks the goroutine. (Fd() would make it
	// blocking: the number is kept apart.)
	return &precise{fd: fd, f: os.NewFile(uintptr(fd), "timerfd")}
}

func (p *precise) close() {
	if p != nil {
		p.f.Close()
	}
}

// sleep waits for d (≤ fine) on the timerfd; it reports false when the
// timerfd failed, so that the caller falls back to a Go timer.
func (p *precise) sleep(d time.Duration) bool {
	if d <= 0 {
		return true
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if unix.TimerfdSettime(p.fd, 0, &spec, nil) != nil {
		return false
	}
	p.f.SetReadDeadline(time.Now().Add(d + 100*time.Millisecond)) // a safety net only
	var buf [8]byte
	_, err := p.f.Read(buf[:])
	return err == nil
}

// sleepFor waits for d or until ctx is done and reports whether d passed.
func sleepFor(ctx context.Context, t *time.Timer, p *precise, d time.Duration) bool {
	end := time.Now().Add(d)
	if p != nil && d > fine {
		if !timerSleep(ctx, t, d-fine) {
			return false
		}
		d = time.Until(end)
	}
	if p != nil && p.sleep(d) {
		return ctx.Err() == nil
	}
	return timerSleep(ctx, t, time.Until(end))
}
