package rules

import (
	"strings"
	"testing"
)

// TestLint: each finding of lint on the rule sets that call for it, and
// none on a set that limits every kind of caller (issue 31 §6).
func TestLint(t *testing.T) {
	for _, tc := range []struct {
		name string
		doc  string
		want []string // substrings of the findings, in order; none: no finding
	}{
		{"by user leaves API keys unlimited", `
default_plan: free
rules:
  - {id: free-per-user, match: {plan: free}, by: user, limit: 100, window: 1m}
  - {id: anon, match: {plan: free}, by: api_key, limit: 10, window: 1m, enabled: false}
`, []string{`Callers with an API key and no user on plan "free" are limited by no rule (its rules key by what they lack: "free-per-user" by user)`,
			`Anonymous callers (no user, no API key) on plan "free" are limited by no rule`}},
		{"by ip for anonymous traffic also counts users", `
default_plan: free
rules:
  - {id: free-per-user, match: {plan: free}, by: user, limit: 100, window: 1m}
  - {id: anon, match: {plan: free}, by: ip, limit: 10, window: 1m}
`, []string{`line 5: rule "anon": keyed by ip, it also counts the signed-in callers and API keys that "free-per-user" limit`}},
		{"a plan with rules by user only", `
rules:
  - {id: pro, match: {plan: pro}, by: user, limit: 100, window: 1m}
`, []string{`Callers with an API key and no user on plan "pro" are limited by no rule`,
			`Signed-in callers (with a user id) on a plan no rule names are limited by no rule (no rule applies to them)`,
			`Callers with an API key and no user on a plan no rule names`,
			`Anonymous callers (no user, no API key) on a plan no rule names`}},
		{"the README's advice: by user, then by ip for anonymous traffic", `
rules:
  - {id: per-user, by: user, limit: 100, window: 1m}
  - {id: per-ip, by: ip, limit: 10, window: 1m}
`, []string{`rule "per-ip": keyed by ip, it also counts`}},
		{"burst: 0 on a leaky bucket", `
rules:
  - id: pace
    limit: 10
    window: 1s
    algorithm: leaky_bucket
    burst: 0
`, []string{`line 7: rule "pace": burst: 0 on a leaky_bucket is the default burst, 1 call on top of the conforming one, so 2 calls pass at once`}},
		{"fine: by client, and a leaky bucket without burst", `
default_plan: free
rules:
  - {id: per-client, by: client, limit: 100, window: 1m}
  - {id: pace, limit: 10, window: 1s, algorithm: leaky_bucket}
  - {id: login, match: {endpoint: "POST /login"}, by: ip, limit: 5, window: 1m}
`, nil},
		{"no rules at all", "rules: []\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, err := lint([]byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range fs {
				got = append(got, f.String())
			}
			if len(got) != len(tc.want) {
				t.Fatalf("lint = %d findings, want %d:\n%s", len(got), len(tc.want), strings.Join(got, "\n"))
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("finding %d = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}
