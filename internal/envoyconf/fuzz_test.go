package envoyconf

import (
	"reflect"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/rules"
)

// FuzzImportEnvoy: any file either converts into a Set that validates,
// compiles and reads back from its rules file unchanged, or is an error —
// never a panic, never a rule the rules file cannot hold. A rule whose entries all have
// a fixed value applies to the descriptor made of them.
func FuzzImportEnvoy(f *testing.F) {
	for _, s := range []string{
		envoyNested,
		"domain: d\ndescriptors:\n  - key: k\n    value: v*\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
		"domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        value: \"x\"\n        rate_limit: {unit: second, requests_per_unit: 9}\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true}\n",
		"domain: d\ndescriptors:\n  - key: k\n    value: a*b*\n    share_threshold: true\n    rate_limit: {unit: hour, requests_per_unit: 0, name: n, replaces: [{name: m}]}\n  - key: k\n    value: x\n",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		if len(doc) > 8<<10 {
			return
		}
		s, err := importEnvoy([]File{{Name: "f.yaml", Data: []byte(doc)}})
		if err != nil {
			return
		}
		ix, err := rules.Compile(s)
		if err != nil {
			t.Fatalf("imported set does not compile: %v", err)
		}
		back, b := yamlRoundTrip(t, s)
		if !reflect.DeepEqual(back.Rules, s.Rules) {
			t.Fatalf("round trip changed the rules:\n%s", b)
		}
	rules:
		for _, r := range ix.Rules() {
			for _, e := range r.Match.Entries {
				if e.Value == "" || strings.Contains(e.Value, "*") {
					continue rules // a less specific rule may be passed over for a more specific one
				}
			}
			found := false
			for _, c := range ix.Domain(r.Match.Domain).MatchEntries(r.Match.Entries, nil) {
				found = found || c == r
			}
			if !found {
				t.Fatalf("rule %s: a descriptor of its own fixed entries %v does not select it", r.ID, r.Match.Entries)
			}
		}
	})
}
