package ratelog

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/clocktest"
)

func lines(buf *bytes.Buffer) []string {
	s := strings.TrimSpace(buf.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func TestWarnAtMostOnceAnInterval(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	rl := &Limiter{Now: clk.Now}

	rl.Warn(log, "store failed", "err", "e1")
	rl.Warn(log, "store failed", "err", "e2")
	rl.Warn(log, "store failed", "err", "e3")
	clk.Advance(Interval - time.Nanosecond)
	rl.Warn(log, "store failed", "err", "e4")
	if got := lines(&buf); len(got) != 1 || got[0] != `level=WARN msg="store failed" err=e1 suppressed=0` {
		t.Fatalf("after 4 calls within an interval: lines %q, want only e1 with suppressed=0", got)
	}
	clk.Advance(time.Nanosecond)
	rl.Warn(log, "store failed", "err", "e5")
	got := lines(&buf)
	if len(got) != 2 || got[1] != `level=WARN msg="store failed" err=e5 suppressed=3` {
		t.Fatalf("an interval later: lines %q, want e5 with suppressed=3", got)
	}
}

// TestWarnConcurrent: of many goroutines logging at one instant, exactly
// one line goes out, and the next line counts all the others.
func TestWarnConcurrent(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &buf}, nil))
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	rl := &Limiter{Now: clk.Now}
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
	clk.Advance(Interval)
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
