package algorithm

import "math/bits"

// ceilDiv is ceil(a/b) for a ≥ 0, b > 0, exact (no float rounding).
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// mulDiv returns q, r with m·w = q·l + r, 0 ≤ r < l, for m, l < 2^30 and
// w < 2^45 (limits and bursts ≤ 10^9, windows ≤ 366 days), exact. take.lua
// computes the same with doubles, splitting m in two halves of 15 bits so
// that no product passes 2^53 (see lua's mul_div); Go's uint64 holds m·(w
// mod l) < 2^60 whole.
func mulDiv(m, w, l int64) (q, r int64) {
	wq, wr := w/l, w%l
	p := uint64(m) * uint64(wr)
	return m*wq + int64(p/uint64(l)), int64(p % uint64(l))
}

// token is window/limit µs as q + r/l, 0 ≤ r < l: one token's refill.
type token struct{ q, r, l int64 }

func tokenOf(p Params) token { return token{p.Window / p.Limit, p.Window % p.Limit, p.Limit} }

// times returns mulDiv(m, window, limit) for m < 2^30, dividing only when
// m·r reaches l (never for a cost of 1).
func (t token) times(m int64) (q, r int64) {
	x := uint64(m) * uint64(t.r)
	if x < uint64(t.l) {
		return m * t.q, int64(x)
	}
	return m*t.q + int64(x/uint64(t.l)), int64(x % uint64(t.l))
}

// overBound reports whether a·b/c > bound, for a, b, c > 0, exact.
func overBound(a, b, c, bound int64) bool {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	bh, bl := bits.Mul64(uint64(bound), uint64(c))
	// a·b > bound·c  ⇔  a·b/c > bound (then the quotient passes bound)
	return hi > bh || hi == bh && lo > bl
}

func mul64(a, b uint64) (hi, lo uint64) { return bits.Mul64(a, b) }
func add64(a, b uint64) (sum, carry uint64) {
	return bits.Add64(a, b, 0)
}
func div64(hi, lo, d uint64) (q, r uint64) { return bits.Div64(hi, lo, d) }

// mulDivW returns q, r with m·w = q·l + r, 0 ≤ r < l, for m < 2^30 and
// w, l < 2^45, exact. take.lua's mul_div_w computes the same by long
// multiplication in base 64 (every partial value below 2^53).
func mulDivW(m, w, l int64) (q, r int64) {
	wq, wr := w/l, w%l
	hi, lo := bits.Mul64(uint64(m), uint64(wr))
	qq, rr := bits.Div64(hi, lo, uint64(l)) // m·wr/l < m: no overflow
	return m*wq + int64(qq), int64(rr)
}
