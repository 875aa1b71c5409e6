package quote

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestShort(t *testing.T) {
	long := strings.Repeat("é", 60) // 120 bytes
	for _, tt := range []struct{ in, want string }{
		{"", `""`},
		{"a\"b", `"a\"b"`},
		{strings.Repeat("x", 80), `"` + strings.Repeat("x", 80) + `"`},
		{strings.Repeat("x", 41) + strings.Repeat("y", 40), `"` + strings.Repeat("x", 40) + `"…"` + strings.Repeat("y", 40) + `"`},
		{long, `"` + strings.Repeat("é", 20) + `"…"` + strings.Repeat("é", 20) + `"`},
	} {
		got := Short(tt.in)
		if got != tt.want {
			t.Errorf("Short(%q) = %s, want %s", tt.in, got, tt.want)
		}
		if !utf8.ValidString(got) {
			t.Errorf("Short(%q) = %q, not valid UTF-8", tt.in, got)
		}
	}
}
