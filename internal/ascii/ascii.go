// Package ascii checks and reads strings eight bytes at a time, for the
// hot paths that validate caller-controlled text (client ids, header
// values, paths).
package ascii

// Printable reports whether every byte of s is printable ASCII,
// 0x20…0x7e. It reads eight bytes at a time: the last word overlaps the
// one before, and under eight bytes two words of four overlap.
func Printable(s string) bool {
	n := len(s)
	switch {
	case n >= 8:
		last := Load64(s[n-8:])
		for ; len(s) > 8; s = s[8:] {
			if !PrintableWord(Load64(s)) {
				return false
			}
		}
		return PrintableWord(last)
	case n >= 4:
		return PrintableWord(Load32(s[:4]) | Load32(s[n-4:])<<32)
	}
	for i := 0; i < n; i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return false
		}
	}
	return true
}

// PrintableWord reports whether every byte of x is printable ASCII: none
// is below 0x20 and none above 0x7e (exact for the word as a whole, not
// byte by byte).
func PrintableWord(x uint64) bool {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	return ((x-0x20*lo)&^x|(x+lo)|x)&hi == 0
}

// Load32 is the first four bytes of s, little endian.
func Load32(s string) uint64 {
	_ = s[3]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24
}

// Load64 is the first eight bytes of s, little endian.
func Load64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}
