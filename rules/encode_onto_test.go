package rules

import (
	"bytes"
	"testing"
)

// FuzzEncodeYAMLOnto: whatever rules file an operator wrote, a write over
// it either reads back as the set written or fails (and the plain
// rendering is written instead); it never panics.
func FuzzEncodeYAMLOnto(f *testing.F) {
	f.Add("# header\ndefault_plan: free\nclients:\n  \"user:a\": {plan: pro} # a\nrules:\n  # r\n  - {id: a, limit: 1, window: 1m}\n  - id: b\n    limit: 2 # two\n    window: 1s\n", uint8(3))
	f.Add("rules: []\n", uint8(0))
	f.Add("revision: 4\nrules:\n- id: x\n  limit: 5\n  window: 1h\n  algorithm: leaky_bucket\n  burst: 0\nclients: {\"api_key:k\": {plan: p}}\n", uint8(7))
	f.Fuzz(func(t *testing.T, prev string, change uint8) {
		s, err := ParseRulesFile([]byte(prev))
		if err != nil {
			return
		}
		next := s.Clone()
		next.Revision++
		switch change % 5 {
		case 0:
			next.Rules = append(next.Rules, Rule{ID: "added-by-api", Limit: 3, Window: Duration(60e9)})
		case 1:
			if len(next.Rules) > 0 {
				next.Rules[0].Limit++
			}
		case 2:
			if len(next.Rules) > 0 {
				next.Rules = next.Rules[1:]
			}
		case 3:
			if next.Clients == nil {
				next.Clients = map[string]Client{}
			}
			next.Clients["api_key:new"] = Client{Plan: "gold"}
		case 4:
			next.DefaultPlan, next.Clients = "", nil
		}
		if err := next.Validate(); err != nil {
			return
		}
		out, err := encodeYAMLOnto([]byte(prev), next)
		if err != nil {
			return
		}
		back, err := ParseRulesFile(out)
		if err != nil {
			t.Fatalf("EncodeYAMLOnto wrote a file that does not load: %v\n%s", err, out)
		}
		want, _ := EncodeYAML(next)
		got, _ := EncodeYAML(back)
		if !bytes.Equal(want, got) {
			t.Fatalf("EncodeYAMLOnto wrote\n%s\nwhich reads back as\n%s\nwant\n%s", out, got, want)
		}
	})
}
