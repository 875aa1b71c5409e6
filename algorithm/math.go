package algorithm

import "math"

// ceilF rounds x up to a whole microsecond.
func ceilF(x float64) int64 { return int64(math.Ceil(x)) }

func floorI(x float64) int64 { return int64(math.Floor(x)) }

// ceilDiv is ceil(a/b) for a ≥ 0, b > 0, exact (no float rounding).
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
