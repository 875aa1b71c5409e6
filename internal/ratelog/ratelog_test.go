package ratelog

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func lines(buf *bytes.Buffer) []string {
	s := strings.TrimSpace(buf.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// The tests run in a synctest bubble: its clock moves only when every
// goroutine in it waits, so time.Sleep moves it by exactly the time asked.

func TestWarnAtMostOnceAnInterval(t *testing.T) { synctest.Test(t, testWarnAtMostOnceAnInterval) }

func testWarnAtMostOnceAnInterval(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
	var rl Limiter

	rl.Warn(log, "store failed", "err", "e1")
	rl.Warn(log, "store failed", "err", "e2")
	rl.Warn(log, "store failed", "err", "e3")
	time.Sleep(Interval - time.Nanosecond)
	rl.Warn(log, "store failed", "err", "e4")
	if got := lines(&buf); len(got) != 1 || got[0] != `level=WARN msg="store failed" err=e1 suppressed=0` {
		t.Fatalf("after 4 calls within an interval: lines %q, want only e1 with suppressed=0", got)
	}
	time.Sleep(time.Nanosecond)
	rl.Warn(log, "store failed", "err", "e5")
	got := lines(&buf)
	if len(got) != 2 || got[1] != `level=WARN msg="store failed" err=e5 suppressed=3` {
		t.Fatalf("an interval later: lines %q, want e5 with suppressed=3", got)
	}
}

// TestWarnConcurrent: of many goroutines logging at one instant, exactly
// one line goes out, and the next line counts all the others.
func TestWarnConcurrent(t *testing.T) { synctest.Test(t, testWarnConcurrent) }

func testWarnConcurrent(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &buf}, nil))
	var rl Limiter
	const n = 64
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rl.Warn(log, "x")
		}()
	}
	wg.Wait()
	mu.Lock()
	if got := len(lines(&buf)); got != 1 {
		t.Fatalf("%d goroutines at one instant wrote %d lines, want 1", n, got)
	}
	mu.Unlock()
	time.Sleep(Interval)
	rl.Warn(log, "x")
	mu.Lock()
	defer mu.Unlock()
	if got := lines(&buf); len(got) != 2 || !strings.HasSuffix(got[1], "suppressed=63") {
		t.Fatalf("next line %q, want suppressed=63", got)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
