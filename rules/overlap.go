package rules

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/urlpath"
)

// maxRulesPerCall is the most enabled rules one call may match: the rules
// one decision applies, each a bucket taken in one atomic store operation
// (limiter.MaxRulesPerCall, which the limiter's tests hold equal to it).
// Compile and Set.Validate refuse a Set in which some call could match
// more, so that no rule set in force can make a decision fail.
const maxRulesPerCall = 32

// checkOverlap returns a *FieldError for the field "rules" when some call
// matches more than maxRulesPerCall enabled rules, naming the rules one
// such call matches; else nil.
//
// The count is what Match returns, before a rule is skipped for a call
// that lacks its identity: a rule keyed by user and one keyed by ip both
// apply to a call that has both. It is exact: every call matches a subset
// of the rules matched by one of a finite set of calls made from the
// rules themselves. For each view (no domain, and each domain) and each
// plan a rule names (and no plan, which a plan no rule names gets), the
// calls are every method a rule names (and GET, standing for any other,
// and HEAD) on every path a rule names — the clean path of an exact
// pattern, the base of a prefix one ("/api" for "/api/*", "/" for "/*"),
// and for path_case insensitive rules also each case-sensitive key
// continued by an insensitive key below it. A call on a
// path no rule names matches only prefix rules, and those all match the
// deepest prefix base above it; a method no rule names matches only "*"
// rules, as GET does at least. Rules with match.headers add, for each
// header name they are indexed by (see Index), the most that any one value
// of it reaches (every value some rule names is tried), counting a rule
// with several headers whenever the header it is indexed by fits: the
// count is exact for rules with one header, and may exceed what a real
// call matches when rules with several headers exclude each other. A plan whose rules plus the most any call
// matches without a plan stay within the bound is not searched.
func (ix *Index) checkOverlap() error {
	if o := ix.findOverlap(); o != nil {
		return o.err()
	}
	return nil
}

// overlap is a call that matches more than maxRulesPerCall rules.
type overlap struct {
	domain, plan, method, path string
	headers                    []string // "X-Tenant: acme", the headers the call carries
	matched                    []*Compiled
}

// findOverlap returns a call that matches more than maxRulesPerCall
// enabled rules, or nil when there is none (see checkOverlap).
func (ix *Index) findOverlap() *overlap {
	domains := append([]string{""}, sortedKeys(ix.domains)...)
	for _, domain := range domains {
		v := ix.Domain(domain)
		byPlan := make(map[string][]*Compiled)
		for _, c := range v.rules {
			if c.IsEnabled() && (c.Match.Domain == "" || c.Match.Domain == domain) {
				byPlan[c.Match.Plan] = append(byPlan[c.Match.Plan], c)
			}
		}
		most := len(byPlan[""]) // the most rules without a plan one call matches
		if most > maxRulesPerCall {
			n, o := v.mostMatched(domain, "", byPlan[""])
			if o != nil {
				return o
			}
			most = n
		}
		for _, p := range sortedKeys(byPlan) {
			if p == "" || most+len(byPlan[p]) <= maxRulesPerCall {
				continue
			}
			cands := append(append([]*Compiled(nil), byPlan[""]...), byPlan[p]...)
			if _, o := v.mostMatched(domain, p, cands); o != nil {
				return o
			}
		}
	}
	return nil
}

// mostMatched returns the most rules Match finds for a call on plan in v,
// trying the calls made from the methods and paths of rules (see
// checkOverlap), or a call that matches more than maxRulesPerCall.
func (v *Index) mostMatched(domain, plan string, rules []*Compiled) (int, *overlap) {
	methods := []string{"GET", "HEAD"}
	paths := []string{}
	seenM := map[string]bool{"GET": true, "HEAD": true, "*": true}
	seenP := map[string]bool{}
	for _, c := range rules {
		// The method and path key the index holds the rule under (add).
		for _, m := range strings.Split(c.method, "|") {
			if !seenM[m] {
				seenM[m] = true
				methods = append(methods, m)
			}
		}
		p := c.path
		if p == "" {
			p = "/"
		}
		if !seenP[p] {
			seenP[p] = true
			paths = append(paths, p)
		}
	}
	// A call's path matches case-sensitive rules under its own spelling and
	// path_case insensitive ones under its lower case, so a path that
	// spells a case-sensitive key S and goes on as an insensitive key F
	// below it is a call of its own: S followed by the rest of F.
	var folded, exact []string
	for _, c := range rules {
		if c.path == "" {
			continue
		}
		if c.Match.PathCase == PathCaseInsensitive {
			folded = append(folded, c.path)
		} else {
			exact = append(exact, c.path)
		}
	}
	for _, s := range exact {
		lower := string(urlpath.AppendLower(nil, s))
		for _, f := range folded {
			if len(f) > len(s) && f[:len(s)] == lower && f[len(s)] == '/' {
				if p := s + f[len(s):]; !seenP[p] {
					seenP[p] = true
					paths = append(paths, p)
				}
			}
		}
	}
	// What rules with headers add to a call at most, whatever its method
	// and path: when that keeps a call within the bound, they need no
	// search.
	hdrBound := 0
	for _, hi := range v.headers {
		hdrBound += hi.most()
	}
	most := 0
	var buf, hbuf, best []*Compiled
	for _, p := range paths {
		for _, m := range methods {
			buf = v.Match(plan, m, p, buf[:0])
			if len(buf)+hdrBound <= maxRulesPerCall {
				most = max(most, len(buf)+hdrBound)
				continue
			}
			// Rules with headers: for each header name they are indexed
			// by, the value that reaches the most of them (a call carries
			// one value of each name).
			var hdrs []string
			for _, hi := range v.headers {
				best = best[:0]
				bestV := ""
				for _, val := range hi.values() {
					hbuf = hi.match(hbuf[:0], &call{plan: plan, method: m, mbit: methodBit(m), path: p, counting: true}, val)
					if len(hbuf) > len(best) {
						best, bestV = append(best[:0], hbuf...), val
					}
				}
				if len(best) > 0 {
					buf = append(buf, best...)
					hdrs = append(hdrs, hi.name+": "+bestV)
				}
			}
			if len(buf) > maxRulesPerCall {
				sortSeq(buf)
				slices.Sort(hdrs)
				return 0, &overlap{domain: domain, plan: plan, method: m, path: p, headers: hdrs, matched: buf}
			}
			most = max(most, len(buf))
		}
	}
	return most, nil
}

// err is the *FieldError for the field "rules" that names o's rules, the
// limit and the fix.
func (o *overlap) err() *FieldError {
	var b strings.Builder
	b.WriteString("a call such as ")
	b.WriteString(o.method + " " + o.path)
	if len(o.headers) > 0 {
		b.WriteString(" with " + strings.Join(o.headers, ", "))
	}
	if o.plan == "" {
		b.WriteString(" on any plan")
	} else {
		b.WriteString(" on plan " + strconv.Quote(o.plan))
	}
	if o.domain != "" {
		b.WriteString(" in the Envoy domain " + strconv.Quote(o.domain))
	}
	fmt.Fprintf(&b, " matches %d enabled rules, more than the %d one decision applies: ", len(o.matched), maxRulesPerCall)
	for i, c := range o.matched {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(c.ID))
	}
	fmt.Fprintf(&b, "; give some of them a narrower match (plan, endpoint, headers or domain), disable them, or merge rules that limit the same calls, so that no call matches more than %d", maxRulesPerCall)
	return fieldErr(b.String(), "rules")
}
