package gctune

import (
	"runtime"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, tt := range []struct {
		live, floor uint64
		want        int
	}{
		{5 * mib, 64 * mib, 1180},  // goal 64 MiB: 5 + 5×11.8
		{32 * mib, 64 * mib, 100},  // doubling reaches the floor
		{40 * mib, 64 * mib, 100},  // above it: GOGC=100
		{800 * mib, 64 * mib, 100}, // a large embedded store: untouched
		{1, 64 * mib, maxPercent},  // bounded
		{0, 64 * mib, 100},         // before the first cycle
	} {
		if got := Percent(tt.live, tt.floor, 100); got != tt.want {
			t.Errorf("Percent(%d, %d) = %d, want %d", tt.live, tt.floor, got, tt.want)
		}
	}
}

// TestFloor runs the tuner in this process: after a collection with a small
// live heap it has raised GOGC, and Stop puts 100 back.
func TestFloor(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	tu := Floor(256 << 20)
	if tu == nil {
		t.Fatal("Floor = nil with GOGC and GOMEMLIMIT unset")
	}
	defer tu.Stop()
	runtime.GC()
	deadline := time.Now().Add(5 * time.Second)
	for tu.GOGC() <= 100 && time.Now().Before(deadline) {
		runtime.GC() // the finalizer runs on its own goroutine after a cycle
		time.Sleep(10 * time.Millisecond)
	}
	if g := tu.GOGC(); g <= 100 {
		t.Fatalf("GOGC after collections with a small heap = %d, want > 100", g)
	}
	tu.Stop()
	if g := tu.GOGC(); g != 100 {
		t.Errorf("GOGC after Stop = %d, want 100", g)
	}

	t.Setenv("GOGC", "200")
	if Floor(64<<20) != nil {
		t.Error("Floor with GOGC set = a tuner, want nil (the operator's GOGC wins)")
	}
}
