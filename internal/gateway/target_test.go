package gateway

import (
	"net/url"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/urlpath"
)

// FuzzUpstreamPath: a path upstreamPath takes starts with "/", holds no
// segment an upstream could take for "." or ".." in any spelling, and is
// limited as the target it came from would have been (urlpath.Clean of
// both is the same).
func FuzzUpstreamPath(f *testing.F) {
	for _, s := range []string{"/", "/a/../b", "/a/./b/", "/..", "/a/..", "/%2e%2e/x", "/a;b/../c", "/..;/x", "/a%2f..%2fb",
		"/a/b/../../..", "/a//b", "/caf%C3%A9/..", "/.a/..b/...", "/x/%2E"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		if !strings.HasPrefix(target, "/") || strings.ContainsFunc(target, func(r rune) bool { return r <= ' ' || r >= 0x7f || r == '#' }) {
			return
		}
		u, err := url.ParseRequestURI(target)
		if err != nil {
			return
		}
		before := urlpath.Clean(u.EscapedPath())
		if !upstreamPath(u) {
			return
		}
		p := u.EscapedPath()
		if !strings.HasPrefix(p, "/") {
			t.Fatalf("upstreamPath(%q) = %q, not a path", target, p)
		}
		for _, seg := range strings.Split(p[1:], "/") {
			if seg == "." || seg == ".." || dotLike(seg) {
				t.Fatalf("upstreamPath(%q) = %q: segment %q", target, p, seg)
			}
		}
		if after := urlpath.Clean(p); after != before {
			t.Fatalf("upstreamPath(%q) = %q: limited as %q, the target as %q", target, p, after, before)
		}
	})
}
