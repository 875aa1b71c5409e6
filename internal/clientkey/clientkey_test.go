package clientkey

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// plainRef is Plain written from its doc, byte by byte.
func plainRef(v string) bool {
	if v == "" || len(v) > MaxValue || strings.HasPrefix(v, DigestPrefix) || !utf8.ValidString(v) {
		return false
	}
	return !strings.ContainsFunc(v, unicode.IsControl)
}

// TestPlainWords: Plain, which reads eight bytes at a time, agrees with
// plainRef on random values of the bytes that matter, at every offset
// and length.
func TestPlainWords(t *testing.T) {
	pieces := []string{"a", "Z", "0", " ", "~", "\x00", "\x1f", "\x7f", "\x80", "\xff", "é", "\u0085", "\u00a0", "h:", "€"}
	rng := rand.New(rand.NewPCG(3, 4))
	var b strings.Builder
	for range 300_000 {
		b.Reset()
		for n := rng.IntN(40); n > 0; n-- {
			if rng.IntN(4) == 0 {
				b.WriteString(pieces[rng.IntN(len(pieces))])
			} else {
				b.WriteByte(byte('a' + rng.IntN(26)))
			}
		}
		v := b.String()
		if got, want := Plain(v), plainRef(v); got != want {
			t.Fatalf("Plain(%q) = %v, want %v", v, got, want)
		}
	}
}
