package http1

import (
	"net/url"
	"reflect"
	"strings"
	"testing"
)

// FuzzParseTarget: parseTarget makes of an origin-form target the URL
// url.ParseRequestURI makes, and escapedPath of it is its EscapedPath.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"/", "/api/orders", "/a?b", "/a?", "/a?b?", "/a??", "/a/%41", "/a b", "/*", "/a?%zz",
		"//x/y", "/a;b=c,d:e@f$g&h+i~j", "/caf\xc3\xa9", "/a%2Fb", "/%zz", "/a'b(c)*!", "/?", "/a#b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		if !strings.HasPrefix(target, "/") || strings.ContainsFunc(target, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
			return
		}
		got := parseTarget(target)
		want, err := url.ParseRequestURI(target)
		if (got == nil) != (err != nil) || got != nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("parseTarget(%q) = %#v, url.ParseRequestURI: %#v, %v", target, got, want, err)
		}
		if got != nil && escapedPath(got) != want.EscapedPath() {
			t.Fatalf("escapedPath of %q = %q, want %q", target, escapedPath(got), want.EscapedPath())
		}
	})
}
