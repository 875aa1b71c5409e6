package rules

import (
	"errors"
	"testing"
)

// TestParseRulesFileNeedsRulesList: a document that replaces every rule
// must say what they are; an empty one, or one without a rules: list, is
// ErrNoRules, and "rules: []" written out is zero rules (issue 27 §6).
func TestParseRulesFileNeedsRulesList(t *testing.T) {
	for _, doc := range []string{
		"",
		"\n\n",
		"# only a comment\n",
		"---\n",
		"revision: 3\n",
		"rules:\n",
		"rules: null\n",
		"default_plan: free\nclients: {\"user:a\": {plan: free}}\n",
	} {
		if s, err := ParseRulesFile([]byte(doc)); !errors.Is(err, ErrNoRules) {
			t.Errorf("ParseRulesFile(%q) = %v, %v; want ErrNoRules", doc, s, err)
		}
		if _, err := ParseYAML([]byte(doc)); err != nil {
			t.Errorf("ParseYAML(%q) = %v, want an empty set", doc, err)
		}
	}
	for doc, n := range map[string]int{
		"rules: []\n": 0,
		"rules:\n  - {id: a, limit: 1, window: 1s}\n": 1,
	} {
		s, err := ParseRulesFile([]byte(doc))
		if err != nil || len(s.Rules) != n {
			t.Errorf("ParseRulesFile(%q) = %v, %v; want %d rules", doc, s, err, n)
		}
	}
}
