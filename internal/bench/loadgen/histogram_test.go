package loadgen

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketsCoverEveryValue(t *testing.T) {
	// Every value falls in a bucket whose range holds it and is at most
	// 1/128 of its lower end wide; buckets tile the line without gaps.
	var prevHi int64 = -1
	for i := range numBuckets {
		lo, hi := bucketRange(i)
		if lo != prevHi+1 {
			t.Fatalf("bucketRange(%d) = [%d, %d], want it to start at %d", i, lo, hi, prevHi+1)
		}
		if w := float64(hi - lo + 1); hi > lo && w/float64(lo) > 1.0/subCount {
			t.Fatalf("bucketRange(%d) = [%d, %d]: width %g is %.4f of its start, want ≤ %.4f", i, lo, hi, w, w/float64(lo), 1.0/subCount)
		}
		for _, v := range []int64{lo, hi, lo + (hi-lo)/2} {
			if got := bucketOf(v); got != i {
				t.Fatalf("bucketOf(%d) = %d, want %d", v, got, i)
			}
		}
		prevHi = hi
	}
	if prevHi != maxTrackable {
		t.Fatalf("last bucket ends at %d, want %d", prevHi, maxTrackable)
	}
}

func TestQuantileExactSmallValues(t *testing.T) {
	var h Histogram
	for v := 1; v <= 100; v++ {
		h.Record(time.Duration(v))
	}
	tests := []struct {
		q    float64
		want time.Duration
	}{
		{0, 1}, {0.01, 1}, {0.5, 50}, {0.9, 90}, {0.99, 99}, {0.999, 100}, {1, 100},
	}
	for _, tt := range tests {
		if got := h.Quantile(tt.q); got != tt.want {
			t.Errorf("Quantile(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
	if got, want := h.Count(), uint64(100); got != want {
		t.Errorf("Count() = %d, want %d", got, want)
	}
	if got, want := h.Mean(), time.Duration(51); got != want { // 50.5 rounds to 51
		t.Errorf("Mean() = %v, want %v", got, want)
	}
}

// TestQuantileWithinOnePercent compares the histogram's percentiles with
// the exact ones of the same samples, for distributions shaped like
// latencies.
func TestQuantileWithinOnePercent(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	dists := []struct {
		name string
		gen  func() time.Duration
	}{
		{"lognormal around 200µs", func() time.Duration {
			return time.Duration(200e3 * math.Exp(rng.NormFloat64()*0.8))
		}},
		{"uniform 0-10ms", func() time.Duration { return time.Duration(rng.Int64N(10e6)) }},
		{"bimodal with 1% at 50ms", func() time.Duration {
			if rng.IntN(100) == 0 {
				return time.Duration(50e6 + rng.Int64N(5e6))
			}
			return time.Duration(80e3 + rng.Int64N(40e3))
		}},
	}
	for _, d := range dists {
		t.Run(d.name, func(t *testing.T) {
			var h Histogram
			samples := make([]time.Duration, 50_000)
			for i := range samples {
				samples[i] = d.gen()
				h.Record(samples[i])
			}
			slices.Sort(samples)
			for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
				exact := samples[int(math.Ceil(q*float64(len(samples))))-1]
				got := h.Quantile(q)
				if got < exact || float64(got) > float64(exact)*1.01 {
					t.Errorf("Quantile(%v) = %v, want within [%v, %v]", q, got, exact, time.Duration(float64(exact)*1.01))
				}
			}
			if got, want := h.Max(), samples[len(samples)-1]; got != want {
				t.Errorf("Max() = %v, want %v", got, want)
			}
			if got, want := h.Min(), samples[0]; got != want {
				t.Errorf("Min() = %v, want %v", got, want)
			}
		})
	}
}

func TestMergeEqualsRecordingOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var a, b, all Histogram
	for i := range 10_000 {
		v := time.Duration(rng.Int64N(int64(20 * time.Millisecond)))
		all.Record(v)
		if i%3 == 0 {
			a.Record(v)
		} else {
			b.Record(v)
		}
	}
	var m Histogram
	m.Merge(&a)
	m.Merge(&b)
	m.Merge(&Histogram{}) // empty: no effect
	if m != all {
		t.Fatalf("Merge(a, b) = count %d min %v max %v, want count %d min %v max %v",
			m.Count(), m.Min(), m.Max(), all.Count(), all.Min(), all.Max())
	}
}

func TestHistogramEdges(t *testing.T) {
	var h Histogram
	if got := h.Quantile(0.99); got != 0 {
		t.Errorf("empty Quantile(0.99) = %v, want 0", got)
	}
	h.Record(-5)            // counted as 0
	h.Record(3 * time.Hour) // beyond the tracked range: last bucket, exact max
	if got, want := h.Min(), time.Duration(0); got != want {
		t.Errorf("Min() = %v, want %v", got, want)
	}
	if got, want := h.Max(), 3*time.Hour; got != want {
		t.Errorf("Max() = %v, want %v", got, want)
	}
	if got, want := h.Quantile(1), 3*time.Hour; got != want {
		t.Errorf("Quantile(1) = %v, want %v", got, want)
	}
	if got := h.Quantile(0.99); got > 3*time.Hour || got < maxTrackable {
		t.Errorf("Quantile(0.99) = %v, want in [%v, %v]", got, time.Duration(maxTrackable), 3*time.Hour)
	}
}

func TestRecordDoesNotAllocate(t *testing.T) {
	h := new(Histogram)
	if n := testing.AllocsPerRun(1000, func() { h.Record(123456) }); n != 0 {
		t.Fatalf("Record allocates %v times per call, want 0", n)
	}
}

func BenchmarkHistogramRecord(b *testing.B) {
	var h Histogram
	b.ReportAllocs()
	v := time.Duration(1)
	for b.Loop() {
		h.Record(v)
		v = v*33 + 7&(1<<30-1)
	}
}
