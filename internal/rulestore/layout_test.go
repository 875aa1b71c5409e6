package rulestore

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/rules"
)

// TestWriteKeepsHandLayout: an admin-API write to a hand-written rules file
// keeps its order and its comments, and only the text of what changed
// moves; a rule then appended by hand at the end of the file loads (issue
// 31 §6: clients: moved after rules:, every comment went, and the
// appended rule broke the YAML).
func TestWriteKeepsHandLayout(t *testing.T) {
	fx := newFixture(t)
	const hand = `# Our rate limits. Ask #platform before changing them.
default_plan: free

# Partners: keys handed out by the sales team.
clients:
  "api_key:k_live_42": {plan: partner}   # Acme
  "user:alice": {plan: pro}

rules:
  # Free tier.
  - id: free-per-user
    match: {plan: free}
    limit: 100        # per minute
    window: 1m

  # Login brute force.
  - {id: login, match: {endpoint: "POST /login"}, by: ip, limit: 5, window: 1m}

  - id: old
    limit: 1
    window: 1h
`
	fx.write(t, hand)
	f := fx.open(t)
	ctx := context.Background()
	_, err := f.Update(ctx, -1, func(s *rules.Set) error {
		s.Rules[0].Limit = 200                                      // changed in place
		s.Rules = deleteRule(s.Rules, 2)                            // old removed
		s.Rules = append(s.Rules, rule("new", 7))                   // appended
		s.Clients["api_key:k_live_42"] = rules.Client{Plan: "gold"} // changed in place
		s.Clients["user:bob"] = rules.Client{Plan: "free"}          // added
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got := fx.read(t)
	for _, want := range []string{
		"# Our rate limits. Ask #platform before changing them.",
		"# Partners: keys handed out by the sales team.",
		"# Acme",
		"# Free tier.",
		"# Login brute force.",
		"limit: 200 # per minute",
		`{id: login, match: {endpoint: "POST /login"}, by: ip, limit: 5, window: 1m}`,
		"user:bob",
		"- id: new",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("after the write the file lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "id: old") {
		t.Errorf("the removed rule is still in the file:\n%s", got)
	}
	order := []string{"default_plan:", "clients:", `"api_key:k_live_42"`, "user:alice", "user:bob", "rules:", "free-per-user", "login", "id: new"}
	last := -1
	for _, w := range order {
		i := strings.Index(got, w)
		if i < last {
			t.Errorf("%q is out of its place (want the order %v):\n%s", w, order, got)
		}
		last = i
	}

	// A rule appended by hand, as the operator writes it: it loads.
	fx.write(t, got+"  - id: appended\n    limit: 3\n    window: 1m\n")
	if err := f.Poll(); err != nil {
		t.Fatalf("a rule appended by hand after an API write does not load: %v", err)
	}
	if ids := ruleIDs(f.Current()); !reflect.DeepEqual(ids, []string{"free-per-user", "login", "new", "appended"}) {
		t.Errorf("rules = %v", ids)
	}
}

func deleteRule(rs []rules.Rule, i int) []rules.Rule { return append(rs[:i:i], rs[i+1:]...) }

// TestLoadWarnsFindings: a rules file that loads is linted, and what
// rulecheck.Lint finds is logged at WARN with its line.
func TestLoadWarnsFindings(t *testing.T) {
	fx := newFixture(t)
	fx.write(t, "rules:\n  - {id: pace, limit: 10, window: 1s, algorithm: leaky_bucket, burst: 0}\n  - {id: c, limit: 10, window: 1s}\n")
	fx.open(t)
	if logs := fx.logs.String(); !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, `line 2: rule \"pace\": burst: 0 on a leaky_bucket`) {
		t.Errorf("logs lack the finding at WARN:\n%s", logs)
	}
}
