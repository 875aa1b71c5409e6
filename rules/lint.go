package rules

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/quote"
	"github.com/sluicehq/sluice/internal/rulecheck"
	"github.com/sluicehq/sluice/internal/rulekey"
)

// The checks sluice's service runs on rules are here, behind
// internal/rulecheck, not in this package's API.
func init() {
	rulecheck.Lint = lint
	rulecheck.ValidClientID = validClientID
}

// callerKind is a kind of caller as the limiter tells them apart: with a
// user id (signed in), with an API key and no user, or with neither (only
// an address).
type callerKind int

const (
	signedIn callerKind = iota
	keyOnly
	anonymous
)

var callerNames = [...]string{
	signedIn:  "signed-in callers (with a user id)",
	keyOnly:   "callers with an API key and no user",
	anonymous: "anonymous callers (no user, no API key)",
}

// covers reports which kinds of caller every call of which a rule keyed by
// parts always counts: a key part a call may lack (a user, an API key, a
// header, an entry) leaves out the kinds without it.
func covers(parts []rulekey.Part) [3]bool {
	c := [3]bool{true, true, true}
	for _, p := range parts {
		switch p.Kind {
		case rulekey.User:
			c[keyOnly], c[anonymous] = false, false
		case rulekey.APIKey:
			c[signedIn], c[anonymous] = false, false
		case rulekey.Header, rulekey.Entry:
			c = [3]bool{}
		}
	}
	return c
}

// lint reads a rules file as ParseYAML does (its error is ParseYAML's) and
// returns what the set it holds probably does not mean, in file order:
//
//   - a kind of caller on a plan that no rule limits: a plan's rules keyed
//     by user leave its callers with only an API key unlimited;
//   - a rule keyed by ip beside rules that limit signed-in callers by user
//     or key: it counts them too, so everyone behind one address (an
//     office, a carrier's NAT) shares its bucket — by: client keys
//     anonymous callers by address and the others by user or key;
//   - a leaky_bucket rule written with burst: 0, which is the default
//     burst, 1 call on top of the conforming one, not none.
//
// Rules that are disabled, shadows, unlimited or on Envoy descriptors,
// domains or headers are not counted as limits.
func lint(b []byte) ([]rulecheck.Finding, error) {
	n, err := parseYAML(b)
	if err != nil {
		return nil, err
	}
	s, err := ParseYAML(b)
	if err != nil {
		return nil, err
	}
	line := func(i int, field ...string) int {
		return n.LineOf(append([]string{"rules", strconv.Itoa(i)}, field...))
	}
	var out []rulecheck.Finding

	// Which kinds of caller each plan's rules limit ("" is every plan).
	plans := []string{}
	seenPlan := map[string]bool{}
	addPlan := func(p string) {
		if !seenPlan[p] {
			seenPlan[p] = true
			plans = append(plans, p)
		}
	}
	limits := func(r *Rule) bool {
		return r.IsEnabled() && !r.Shadow && !r.Unlimited && r.Match.Domain == "" &&
			len(r.Match.Entries) == 0 && len(r.Match.Headers) == 0
	}
	for i := range s.Rules {
		if r := &s.Rules[i]; limits(r) {
			addPlan(r.Match.Plan)
		}
	}
	if len(plans) > 0 {
		addPlan(s.DefaultPlan)
	}
	for _, p := range plans {
		var covered [3]bool
		var keyedBy []string
		for i := range s.Rules {
			r := &s.Rules[i]
			if !limits(r) || r.Match.Plan != "" && r.Match.Plan != p {
				continue
			}
			parts, _ := parseBy(r.By)
			c := covers(parts)
			for k := range covered {
				covered[k] = covered[k] || c[k]
			}
			keyedBy = append(keyedBy, fmt.Sprintf("%s by %s", quote.Short(r.ID), cmpBy(r.By)))
		}
		for k := range covered {
			// Callers with no identity are on the default plan only.
			if covered[k] || callerKind(k) == anonymous && p != s.DefaultPlan {
				continue
			}
			where := "on a plan no rule names"
			if p != "" {
				where = "on plan " + quote.Short(p)
			}
			rulesText := "no rule applies to them"
			if len(keyedBy) > 0 {
				rulesText = "its rules key by what they lack: " + strings.Join(keyedBy, ", ")
			}
			out = append(out, rulecheck.Finding{Message: fmt.Sprintf("%s %s are limited by no rule (%s); add a rule keyed by client (the user, else the API key, else the IP) or by what they have",
				upperFirst(callerNames[k]), where, rulesText)})
		}
	}

	for i := range s.Rules {
		r := &s.Rules[i]
		if !limits(r) {
			continue
		}
		// A rule keyed by ip beside rules for signed-in callers.
		if parts, _ := parseBy(r.By); len(parts) > 0 && parts[0].Kind == rulekey.IP && !hasPart(parts, rulekey.User, rulekey.APIKey) {
			var others []string
			for j := range s.Rules {
				o := &s.Rules[j]
				if j == i || !limits(o) || r.Match.Plan != "" && o.Match.Plan != "" && o.Match.Plan != r.Match.Plan {
					continue
				}
				if op, _ := parseBy(o.By); hasPart(op, rulekey.User, rulekey.APIKey) {
					others = append(others, quote.Short(o.ID))
				}
			}
			if len(others) > 0 {
				out = append(out, rulecheck.Finding{Line: line(i, "by"), Rule: r.ID, Message: fmt.Sprintf(
					"keyed by ip, it also counts the signed-in callers and API keys that %s limit, so all of them behind one address (an office, a carrier's NAT) share its bucket; if it is meant for anonymous traffic, key it by client (the user, else the API key, else the IP)",
					strings.Join(others, ", "))})
			}
		}
		// burst: 0 written on a leaky bucket.
		if r.Algorithm == algorithm.LeakyBucket && r.Burst == 0 {
			if bn := n.Lookup("rules", strconv.Itoa(i), "burst"); bn != nil && bn.Kind == tnumber {
				out = append(out, rulecheck.Finding{Line: line(i, "burst"), Rule: r.ID, Message: fmt.Sprintf(
					"burst: 0 on a leaky_bucket is the default burst, 1 call on top of the conforming one, so %d calls pass at once, not 1; write burst: 1 to say so, or use a token_bucket of burst 1 for calls strictly one by one",
					r.Params().Capacity())})
			}
		}
	}
	return out, nil
}

func hasPart(parts []rulekey.Part, kinds ...rulekey.Kind) bool {
	for _, p := range parts {
		for _, k := range kinds {
			if p.Kind == k {
				return true
			}
		}
	}
	return false
}

func cmpBy(b By) string {
	if b == "" {
		return string(ByClient)
	}
	return string(b)
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
