package loadgen

import (
	"math"
	"math/bits"
	"time"
)

// Histogram layout: values are nanoseconds. Values below 2·subCount are
// counted exactly; above, each power-of-two range [2^k, 2^(k+1)) is split
// into subCount equal buckets, so a bucket is at most 1/subCount (0.78%) of
// its values wide — the log-linear scheme of HdrHistogram, at about two
// significant decimal digits.
const (
	subBits  = 7
	subCount = 1 << subBits // buckets per power of two

	// maxTrackable is the largest latency a Histogram resolves (~137 s);
	// larger values are counted in the last bucket (Max still reports them).
	maxTrackable = 1<<37 - 1

	numBuckets = 2*subCount + (37-subBits-1)*subCount
)

// Histogram records durations in a fixed-size log-linear histogram with
// better than 1% relative precision: recording costs a few instructions and
// never allocates, and memory is fixed (~32 KiB) whatever the number of
// samples. The zero value is an empty histogram ready to use. A Histogram is
// not safe for concurrent use: give each goroutine its own and Merge them.
type Histogram struct {
	counts [numBuckets]uint64
	n      uint64
	min    int64
	max    int64
	sum    float64
}

// bucketOf returns the bucket index of v ≥ 0 (in nanoseconds).
func bucketOf(v int64) int {
	if v < 2*subCount {
		return int(v)
	}
	if v > maxTrackable {
		v = maxTrackable
	}
	shift := bits.Len64(uint64(v)) - subBits - 1 // ≥ 1
	top := int(v >> shift)                       // in [subCount, 2·subCount)
	return 2*subCount + (shift-1)*subCount + top - subCount
}

// bucketRange returns the smallest and largest value counted in bucket i.
func bucketRange(i int) (lo, hi int64) {
	if i < 2*subCount {
		return int64(i), int64(i)
	}
	i -= 2 * subCount
	shift := i/subCount + 1
	top := int64(i%subCount + subCount)
	return top << shift, (top+1)<<shift - 1
}

// Record adds one observation; negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	h.counts[bucketOf(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += float64(v)
}

// Merge adds every observation of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.n += o.n
	h.sum += o.sum
}

// Count returns the number of observations.
func (h *Histogram) Count() uint64 { return h.n }

// Max returns the largest observation, exactly (0 when empty).
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Min returns the smallest observation, exactly (0 when empty).
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }

// Mean returns the mean of the observations (0 when empty).
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(math.Round(h.sum / float64(h.n)))
}

// Quantile returns the value below or at which a fraction q (0 ≤ q ≤ 1) of
// the observations fall: the upper end of the bucket holding the
// ceil(q·n)-th smallest observation, clamped to [Min, Max]. It therefore
// never understates a latency percentile, and overstates it by less than 1%.
// It returns 0 when the histogram is empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	switch {
	case q <= 0:
		return time.Duration(h.min)
	case q >= 1:
		return time.Duration(h.max)
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			_, hi := bucketRange(i)
			return time.Duration(min(max(hi, h.min), h.max))
		}
	}
	return time.Duration(h.max)
}
