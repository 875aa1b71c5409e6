package algorithm

import "math"

// ceilF rounds x up to a whole microsecond.
func ceilF(x float64) int64 { return int64(math.Ceil(x)) }

// ceilDuration is the time, rounded up, in which units refill at p's rate:
// ceil(units * window / limit). Lua: math.ceil(units * window / limit).
func ceilDuration(units float64, p Params) int64 {
	if units <= 0 {
		return 0
	}
	return ceilF(float64(units*float64(p.Window)) / float64(p.Limit))
}

// refill is the units regained in elapsed µs: elapsed * limit / window.
// Lua: elapsed * limit / window.
func refill(elapsed int64, p Params) float64 {
	return float64(float64(elapsed)*float64(p.Limit)) / float64(p.Window)
}

func floorI(x float64) int64 { return int64(math.Floor(x)) }

// ceilDiv is ceil(a/b) for a ≥ 0, b > 0, exact (no float rounding).
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
