// Package clientkey decides how a caller's value (a user, an API key, a
// header or entry value) stands in a client id or a bucket key: as itself
// when it is plain, else as its digest. Package identity builds client ids
// with it and the limiter its bucket keys, so that both agree; the rules
// check a client id's digest form against it. Package identity's doc
// tells the model.
package clientkey

import (
	"crypto/sha256"
	"strings"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/sluicehq/sluice/internal/ascii"
)

// MaxValue is the longest value, in bytes, kept as itself; a longer one is
// keyed by its digest.
const MaxValue = 256

// DigestPrefix starts a value keyed by its digest: DigestPrefix and
// DigestLen lowercase hex digits.
const (
	DigestPrefix = "h:"
	DigestLen    = 32 // hex digits: the first 16 bytes of SHA-256
)

// Plain reports whether v is kept as itself: 1 to MaxValue bytes of UTF-8
// without control characters, not starting with DigestPrefix.
func Plain(v string) bool {
	if v == "" || len(v) > MaxValue || strings.HasPrefix(v, DigestPrefix) {
		return false
	}
	if ascii.Printable(v) {
		return true
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < 0x20 || c == 0x7f {
			return false
		}
		if c >= utf8.RuneSelf {
			return utf8.ValidString(v[i:]) && !strings.ContainsFunc(v[i:], unicode.IsControl)
		}
	}
	return true
}

// AppendDigest appends DigestPrefix and the digest of v to dst.
func AppendDigest(dst []byte, v string) []byte {
	// Sum256 only reads its argument: v's bytes are not copied.
	sum := sha256.Sum256(unsafe.Slice(unsafe.StringData(v), len(v)))
	dst = append(dst, DigestPrefix...)
	const hex = "0123456789abcdef"
	for _, b := range sum[:DigestLen/2] {
		dst = append(dst, hex[b>>4], hex[b&0xf])
	}
	return dst
}
