package gateway

import (
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/rules"
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

// FuzzUpstreamPath: a path upstreamPath takes starts with "/", holds no
// segment an upstream could take for "." or ".." in any spelling, and is
// limited as the target it came from would have been (rules.CleanPath of
// both is the same).
func FuzzUpstreamPath(f *testing.F) {
	for _, s := range []string{"/", "/a/../b", "/a/./b/", "/..", "/a/..", "/%2e%2e/x", "/a;b/../c", "/..;/x", "/a%2f..%2fb",
		"/a/b/../../..", "/a//b", "/caf%C3%A9/..", "/.a/..b/...", "/x/%2E"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		u := parseTarget(target)
		if !strings.HasPrefix(target, "/") || strings.ContainsFunc(target, func(r rune) bool { return r <= ' ' || r >= 0x7f || r == '#' }) || u == nil {
			return
		}
		before := rules.CleanPath(escapedPath(u))
		if !upstreamPath(u) {
			return
		}
		p := escapedPath(u)
		if !strings.HasPrefix(p, "/") {
			t.Fatalf("upstreamPath(%q) = %q, not a path", target, p)
		}
		for _, seg := range strings.Split(p[1:], "/") {
			if seg == "." || seg == ".." || dotLike(seg) {
				t.Fatalf("upstreamPath(%q) = %q: segment %q", target, p, seg)
			}
		}
		if after := rules.CleanPath(p); after != before {
			t.Fatalf("upstreamPath(%q) = %q: limited as %q, the target as %q", target, p, after, before)
		}
	})
}
