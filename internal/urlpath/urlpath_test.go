package urlpath

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestWordsClean: the eight-bytes-at-a-time test of IsClean says
// clean only of paths the byte-by-byte one says are clean, and says it of
// every clean path of eight bytes or more without "." (so that it, not the
// byte loop, decides the usual call), over random paths of the bytes that matter, across every
// word boundary.
func TestWordsClean(t *testing.T) {
	const alphabet = "//////..?#%;az09-\x00\x80\xff"
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 0, 40)
	for range 300_000 {
		buf = append(buf[:0], '/')
		for n := rng.IntN(38); n > 0; n-- {
			buf = append(buf, alphabet[rng.IntN(len(alphabet))])
		}
		if buf[len(buf)-1] == '/' {
			buf = append(buf, 'x')
		}
		p := string(buf)
		words, bytes := wordsClean(p), bytesClean(p)
		if words && !bytes {
			t.Fatalf("wordsClean(%q) = true, bytesClean = false", p)
		}
		if bytes && len(p) >= 8 && !strings.Contains(p, ".") && !words {
			t.Fatalf("wordsClean(%q) = false for a clean path without \".\"", p)
		}
	}
}

// TestWordsCleanShort: wordsClean decides every path of four to seven
// bytes as bytesClean does when it holds no ".", and every shorter one is
// left to bytesClean.
func TestWordsCleanShort(t *testing.T) {
	const alphabet = "/.?#%;a-"
	var rec func(p []byte)
	rec = func(p []byte) {
		if n := len(p); n >= 2 && p[n-1] != '/' {
			s := string(p)
			words, bytes := wordsClean(s), bytesClean(s)
			if words && (!bytes || n < 4) {
				t.Fatalf("wordsClean(%q) = true, bytesClean = %v", s, bytes)
			}
			if n >= 4 && bytes && !strings.Contains(s, ".") && !words {
				t.Fatalf("wordsClean(%q) = false for a clean path without \".\"", s)
			}
		}
		if len(p) == 8 {
			return
		}
		for i := range len(alphabet) {
			rec(append(p, alphabet[i]))
		}
	}
	rec([]byte{'/'})
}
