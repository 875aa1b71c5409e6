package middleware

import (
	"net/url"
	"testing"
)

// TestEscapedPath: escapedPath is URL.EscapedPath.
func TestEscapedPath(t *testing.T) {
	for _, target := range []string{"/", "/api/orders", "/a;b=c,d:e@f$g&h+i~j", "/a%2Fb", "/a%41", "/caf%C3%A9", "/a'b(c)*!", "/%7e", "*"} {
		u, err := url.ParseRequestURI(target)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := escapedPath(u), u.EscapedPath(); got != want {
			t.Errorf("escapedPath(%q) = %q, want %q", target, got, want)
		}
	}
	for _, p := range []string{"/a b", "/é", "/a?b", "/a%b", "/a#b"} {
		u := &url.URL{Path: p}
		if got, want := escapedPath(u), u.EscapedPath(); got != want {
			t.Errorf("escapedPath of path %q = %q, want %q", p, got, want)
		}
	}
}
