package ascii

import (
	"strings"
	"testing"
)

// TestPrintable: Printable, eight bytes at a time, agrees with a byte by
// byte check on every byte in every position.
func TestPrintable(t *testing.T) {
	for n := 0; n <= 17; n++ {
		for pos := 0; pos < n; pos++ {
			for c := 0; c < 256; c++ {
				b := []byte(strings.Repeat("a", n))
				b[pos] = byte(c)
				want := c >= 0x20 && c < 0x7f
				if got := Printable(string(b)); got != want {
					t.Fatalf("Printable(%q) = %v, want %v", b, got, want)
				}
			}
		}
	}
}
