package gateway

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/sluicehq/sluice/internal/jsonhttp"
)

// CodeBadTarget is the error code of a call whose request target the
// gateway refuses to forward (400).
const CodeBadTarget = "invalid_request"

// upstreamPath makes u's path the one the upstream is sent (under the
// upstream's path prefix), before the limiter sees it, so that the
// limiter decides on exactly that path and no target climbs out of the
// prefix:
//
//   - an absolute-form target without a path ("http://host") is "/", as
//     the request line sent upstream spells it;
//   - "." and ".." segments are resolved (RFC 3986 section 5.2.4), never
//     above the root, as a browser would have before sending them; in a
//     path that has them, empty segments and segments of parameters only
//     are dropped ("/a//.." is "/", as urlpath.Clean and nginx's
//     merge_slashes read it);
//   - a target that is not a path ("http:admin/x", "*"), or with a segment
//     that an upstream could still take for "." or ".." (one spelled with
//     %2e, with parameters as in "..;", or around an escaped / or \), is
//     refused: ok is false.
//
// A path with none of '%', ';' or a '.' after a '/' is left as it is,
// without allocating.
func upstreamPath(u *url.URL) (ok bool) {
	if u.Opaque != "" {
		return false
	}
	if u.Path == "" && u.RawPath == "" {
		u.Path = "/"
		return true
	}
	p := u.EscapedPath()
	if p == "" || p[0] != '/' {
		return false
	}
	if !maybeDots(p) {
		return true
	}
	clean, ok := resolveDots(p)
	if !ok {
		return false
	}
	if clean == p {
		return true
	}
	path, err := url.PathUnescape(clean)
	if err != nil {
		return false
	}
	u.Path, u.RawPath = path, ""
	if u.EscapedPath() != clean {
		u.RawPath = clean
	}
	return true
}

// maybeDots reports whether the escaped path p may hold a dot segment in
// some spelling: it has a '%', a ';' or a '.' right after a '/'.
func maybeDots(p string) bool {
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '%', ';':
			return true
		case '.':
			if p[i-1] == '/' { // p starts with '/'
				return true
			}
		}
	}
	return false
}

// resolveDots resolves the "." and ".." segments of the escaped path p
// and reports whether what is left has no segment an upstream could take
// for one (see upstreamPath). A path without them is p itself; in one
// with them, segments that are empty or only parameters (";x") are
// dropped too, as urlpath.Clean reads them.
func resolveDots(p string) (string, bool) {
	dots := false
	for rest := p[1:]; ; {
		seg, more, found := strings.Cut(rest, "/")
		if seg == "." || seg == ".." {
			dots = true
		} else if dotLike(seg) {
			return "", false
		}
		if !found {
			break
		}
		rest = more
	}
	if !dots {
		return p, true
	}
	segs := make([]string, 0, strings.Count(p, "/"))
	trailing := false
	for rest := p[1:]; ; {
		seg, more, found := strings.Cut(rest, "/")
		trailing = found && more == ""
		switch {
		case seg == ".":
			trailing = true
		case seg == "..":
			if len(segs) > 0 {
				segs = segs[:len(segs)-1]
			}
			trailing = true
		case seg != "" && seg[0] != ';':
			segs = append(segs, seg)
		}
		if !found {
			break
		}
		rest = more
	}
	out := "/" + strings.Join(segs, "/")
	if trailing && len(segs) > 0 {
		out += "/"
	}
	return out, true
}

// dotLike reports whether the escaped segment seg, its parameters (from
// a ';') dropped and its escapes decoded once, is or holds, between
// escaped slashes or backslashes, "." or "..".
func dotLike(seg string) bool {
	if i := strings.IndexByte(seg, ';'); i >= 0 {
		seg = seg[:i]
	}
	if !strings.Contains(seg, "%") {
		return seg == "." || seg == ".."
	}
	d, err := url.PathUnescape(seg)
	if err != nil {
		d = seg // not ours to judge: the upstream gets it as it is
	}
	for _, piece := range strings.FieldsFunc(d, func(r rune) bool { return r == '/' || r == '\\' }) {
		if piece == "." || piece == ".." {
			return true
		}
	}
	return d == "." || d == ".."
}

// badTarget answers a call whose target upstreamPath refuses.
func badTarget(w http.ResponseWriter) {
	jsonhttp.WriteError(w, http.StatusBadRequest, CodeBadTarget, "the request target is not a path the gateway forwards: no dot segments in escaped form, no opaque or '*' targets")
}
