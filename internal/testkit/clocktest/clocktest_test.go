package clocktest

import (
	"context"
	"sync"
	"testing"
	"time"
)

func TestClockMovesOnlyWhenMoved(t *testing.T) {
	start := time.Date(2026, 12, 1, 12, 0, 0, 300_000_000, time.UTC)
	c := New(start)
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("Now() = %v, want %v", got, start)
	}
	c.Advance(1500 * time.Millisecond)
	if got, want := c.Now(), start.Add(1500*time.Millisecond); !got.Equal(want) {
		t.Fatalf("Now() after Advance(1.5s) = %v, want %v", got, want)
	}
	if got, want := c.Micros(), start.Add(1500*time.Millisecond).UnixMicro(); got != want {
		t.Fatalf("Micros() = %d, want %d", got, want)
	}
	c.Set(start.Add(-time.Minute))
	if got, want := c.Now(), start.Add(-time.Minute); !got.Equal(want) {
		t.Fatalf("Now() after Set(start-1m) = %v, want %v", got, want)
	}
}

func TestSleep(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	c := New(start)
	if err := c.Sleep(context.Background(), time.Hour); err != nil {
		t.Fatalf("Sleep(1h) = %v, want nil", err)
	}
	if got, want := c.Now(), start.Add(time.Hour); !got.Equal(want) {
		t.Fatalf("Now() after Sleep(1h) = %v, want %v", got, want)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Sleep(ctx, time.Hour); err != context.Canceled {
		t.Fatalf("Sleep on a cancelled context = %v, want %v", err, context.Canceled)
	}
	if got, want := c.Now(), start.Add(time.Hour); !got.Equal(want) {
		t.Fatalf("Now() after a cancelled Sleep = %v, want %v (unmoved)", got, want)
	}
}

func TestConcurrentAdvance(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	c := New(start)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				c.Advance(time.Millisecond)
				_ = c.Now()
			}
		}()
	}
	wg.Wait()
	if got, want := c.Now(), start.Add(800*time.Millisecond); !got.Equal(want) {
		t.Fatalf("Now() after 800 concurrent Advance(1ms) = %v, want %v", got, want)
	}
}
