package rules

import (
	"strings"
	"testing"
)

// TestYAMLErrorLine: a YAML syntax error names the line where the text goes
// wrong, not the start of the block around it (issue 31 §6: a rule appended
// by hand with a wrong indentation was reported lines above, or on line 1).
func TestYAMLErrorLine(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		want string
	}{
		{"rules:\n  - id: a\n    limit: 1\n    window: 1m\n - id: b\n   limit: 2\n", "line 5: did not find expected key (check this line's indentation"},
		{"rules:\n  - id: a\n    limit: 1\n    window: 1m\n  - id: b\n   limit: 2\n   window: 1m\n", "line 6: did not find expected '-' indicator"},
		{"rules:\n  - id: a\n    limit: 1\n    window: 1m\n\n\n\n  - id: b\n      limit: 2\n    window: 1m\n", "line 9: mapping values are not allowed in this context"},
		{"revision: 2\nrules:\n  - id: a\n    limit: 1\n    window: 1m\nclients:\n  \"user:x\": {plan: a}\n  - id: b\n    limit: 2\n    window: 1m\n", "line 8: did not find expected key"},
		{"rules:\n- id: a\n  limit: 1\n  window: 1m\n\tlimit: 3\n", "line 5: found a tab character"},
		{"rules:\n  - id: a\n    limit: 1\n    window: 1m\n    match: {plan: \"x}\n  - id: c\n    limit: 1\n    window: 1m\n", "line 5: found unexpected end of stream"},
	} {
		_, err := ParseYAML([]byte(tc.doc))
		if err == nil || !strings.HasPrefix(err.Error(), "invalid YAML: "+tc.want) {
			t.Errorf("ParseYAML(%q) = %v, want %q", tc.doc, err, "invalid YAML: "+tc.want)
		}
	}
}
