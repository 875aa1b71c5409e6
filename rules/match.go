package rules

import (
	"math/bits"
	"net/http"
	"slices"
	"unsafe"

	"github.com/sluicehq/sluice/internal/urlpath"
)

// Match appends to dst every enabled rule whose match fits a call on plan
// with this method and path and no headers, in set order (ascending Seq),
// and returns dst: MatchHeader with h nil.
func (ix *Index) Match(plan, method, path string, dst []*Compiled) []*Compiled {
	return ix.MatchHeader(plan, method, path, nil, dst)
}

// MatchHeader appends to dst every enabled rule whose match fits a call on
// plan with this method, path and request headers, in set order (ascending
// Seq), and returns dst. Rules that name a domain fit only on the view of
// their domain (Domain). A rule without a plan fits every plan; plan ""
// fits only those. path is the request path as the call gave it: Match
// makes it clean (see Paths in the package doc) before it compares. Methods compare without
// regard to ASCII case, and a rule on GET also fits HEAD. h is read as
// net/http keeps it, by canonical name (textproto.CanonicalMIMEHeaderKey),
// and a header's first value is the one compared. MatchHeader allocates
// nothing when dst has the capacity and the clean path is at most 1 KiB.
func (ix *Index) MatchHeader(plan, method, path string, h http.Header, dst []*Compiled) []*Compiled {
	if ix == nil {
		return dst
	}
	start := len(dst)
	c := call{plan: plan, method: method, mbit: methodBit(method), path: path, header: h}
	if ix.needPath && !urlpath.IsClean(path) {
		dst = ix.matchUnclean(dst, &c)
	} else {
		dst = ix.matcher.match(dst, &c)
	}
	sortSeq(dst[start:])
	return dst
}

// matchUnclean matches c with its path made clean. Its buffer is apart so
// that a clean path, the usual case, does not pay for zeroing it.
func (ix *Index) matchUnclean(dst []*Compiled, c *call) []*Compiled {
	var buf [1024]byte
	clean := *c
	clean.path = bytesString(urlpath.AppendClean(buf[:0], c.path))
	return ix.matcher.match(dst, &clean)
}

// match appends the rules of m that fit c (whose path is clean).
func (m *matcher) match(dst []*Compiled, c *call) []*Compiled {
	if len(m.anyPath) > 0 {
		dst = appendFit(dst, m.anyPath, c)
	}
	if c.plan != "" && m.planAny != nil {
		if m.defaultAny != nil && c.plan == m.defaultPlan {
			dst = appendFit(dst, m.defaultAny, c)
		} else {
			dst = appendFit(dst, m.planAny[c.plan], c)
		}
	}
	// A call without a path fits no rule with one: each has at least "/"
	// (those for any path are above).
	if m.paths.m != nil && c.path != "" {
		dst = m.paths.match(dst, c, c.path)
	}
	if m.folded.m != nil && c.path != "" {
		// Rule paths are shorter than maxEndpoint: the lower case of the
		// first maxEndpoint+1 bytes finds every rule that fits, and no
		// exact rule fits a path of that length.
		var lower [maxEndpoint + 1]byte
		dst = m.folded.match(dst, c, bytesString(urlpath.AppendLower(lower[:0], c.path[:min(len(c.path), len(lower))])))
	}
	if len(c.header) == 0 { // no header: no rule on one fits
		return dst
	}
	for _, hi := range m.headers {
		if vs := c.header[hi.name]; len(vs) > 0 && vs[0] != "" {
			dst = hi.match(dst, c, vs[0])
		}
	}
	return dst
}

// match appends the rules of pi that fit c on path (clean, and in lower
// case for the folded index).
func (pi *pathIndex) match(dst []*Compiled, c *call, path string) []*Compiled {
	// Exact rules for path, and prefix rules with base path.
	if pr := pi.m[path]; pr != nil {
		dst = pr.append(dst, c, true)
	}
	// A prefix base B also fits when path starts with B+"/": look up
	// the part before each "/" whose length some prefix base has, visiting
	// those lengths (fewer than the path's bytes, as a rule) rather than
	// the bytes.
	n := min(len(path), maxEndpoint)
	for w := 0; w*64 < n; w++ {
		set := pi.lens[w]
		if rest := n - w*64; rest < 64 {
			set &= 1<<rest - 1
		}
		for ; set != 0; set &= set - 1 {
			if i := w*64 + bits.TrailingZeros64(set); i > 0 && path[i] == '/' {
				if pr := pi.m[path[:i]]; pr != nil {
					dst = pr.append(dst, c, false)
				}
			}
		}
	}
	return dst
}

func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// append adds the rules of pr that fit c: prefix rules, and exact ones
// too when exact.
func (pr *pathRules) append(dst []*Compiled, c *call, exact bool) []*Compiled {
	dst = pr.lists.append(dst, c, exact)
	if c.plan == "" || len(pr.plans) == 0 {
		return dst
	}
	if pr.planMap != nil {
		if l := pr.planMap[c.plan]; l != nil {
			dst = l.append(dst, c, exact)
		}
		return dst
	}
	for i := range pr.plans {
		if pr.plans[i].plan == c.plan {
			return pr.plans[i].append(dst, c, exact)
		}
	}
	return dst
}

func (l *lists) append(dst []*Compiled, c *call, exact bool) []*Compiled {
	if exact {
		dst = appendFit(dst, l.exact, c)
	}
	return appendFit(dst, l.prefix, c)
}

// appendFit appends the rules of list whose method, and headers other than
// the one they are indexed by, fit c.
func appendFit(dst, list []*Compiled, c *call) []*Compiled {
	for _, r := range list {
		if (r.methods&c.mbit != 0 || r.otherMethod && methodFits(r.method, c.method)) && (r.more == nil || r.moreFit(c)) {
			dst = append(dst, r)
		}
	}
	return dst
}

func (r *Compiled) moreFit(c *call) bool {
	if c.counting {
		return true
	}
	for i := range r.more {
		if !r.more[i].fits(c.header) {
			return false
		}
	}
	return true
}

// sortSeq orders s by Seq: an insertion sort for the few rules a call
// usually matches, pdqsort beyond.
func sortSeq(s []*Compiled) {
	if len(s) > 16 {
		slices.SortFunc(s, func(a, b *Compiled) int { return a.Seq - b.Seq })
		return
	}
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j].Seq < s[j-1].Seq; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
