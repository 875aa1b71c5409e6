// Package quote quotes a value for an error message, as every error of
// the rules and of the HTTP APIs spells a value it refuses.
package quote

import (
	"strconv"
	"unicode/utf8"
)

// Short quotes s as strconv.Quote does, eliding the middle of a value
// longer than 80 bytes (at rune boundaries).
func Short(s string) string {
	const max = 80
	if len(s) > max {
		cut := max / 2
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		end := len(s) - max/2
		for end < len(s) && !utf8.RuneStart(s[end]) {
			end++
		}
		return strconv.Quote(s[:cut]) + "…" + strconv.Quote(s[end:])
	}
	return strconv.Quote(s)
}
