package envoyconf

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"

	"github.com/sluicehq/sluice/rules"
)

// The configurations below are written for this project; each uses a
// feature that envoyproxy/ratelimit's README and example configuration
// files use: one level of key/value, nested descriptors, keys without a
// value, wildcard values, shadow_mode, detailed_metric, name, every unit.

const envoyNested = `---
domain: edge
descriptors:
  # a placeholder with a nested limit
  - key: source_cluster
    value: front
    descriptors:
      - key: destination_cluster
        value: books
        rate_limit:
          unit: minute
          requests_per_unit: 4
  - key: tenant
    rate_limit:
      unit: minute
      requests_per_unit: 7
    descriptors:
      - key: path
        rate_limit:
          unit: hour
          requests_per_unit: 30
      - key: path
        value: /slow
        rate_limit:
          name: tenant-slow
          unit: second
          requests_per_unit: 2
        shadow_mode: true
  - key: region
    value: eu-*
    detailed_metric: true
    rate_limit:
      unit: Day
      requests_per_unit: 1000
  - key: plain_key
    value: 42
`

func TestImportEnvoy(t *testing.T) {
	s, err := importEnvoy([]File{{Name: "edge.yaml", Data: []byte(envoyNested)}})
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		id      string
		entries []rules.Entry
		by      rules.By
		limit   int64
		window  time.Duration
		shadow  bool
	}
	wants := []want{
		{"edge.1", []rules.Entry{{Key: "source_cluster", Value: "front"}, {Key: "destination_cluster", Value: "books"}}, rules.ByGlobal, 4, time.Minute, false},
		{"edge.2", []rules.Entry{{Key: "tenant", Value: ""}}, "entry:tenant", 7, time.Minute, false},
		{"edge.3", []rules.Entry{{Key: "tenant", Value: ""}, {Key: "path", Value: ""}}, "entry:tenant+entry:path", 30, time.Hour, false},
		{"tenant-slow", []rules.Entry{{Key: "tenant", Value: ""}, {Key: "path", Value: "/slow"}}, "entry:tenant", 2, time.Second, true},
		{"edge.5", []rules.Entry{{Key: "region", Value: "eu-*"}}, "entry:region", 1000, 24 * time.Hour, false},
		{"edge.6", []rules.Entry{{Key: "plain_key", Value: "42"}}, rules.ByGlobal, 0, 0, false}, // no rate_limit: unlimited
	}
	if len(s.Rules) != len(wants) {
		t.Fatalf("ImportEnvoy made %d rules, want %d: %+v", len(s.Rules), len(wants), s.Rules)
	}
	for i, w := range wants {
		r := s.Rules[i]
		got := want{r.ID, r.Match.Entries, r.By, r.Limit, time.Duration(r.Window), r.Shadow}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("rule %d = %+v, want %+v", i, got, w)
		}
		if unl := i == 5; r.Unlimited != unl {
			t.Errorf("rule %d: unlimited %v, want %v", i, r.Unlimited, unl)
		}
		if r.Match.Domain != "edge" || r.Algorithm != algorithm.FixedWindow && !r.Unlimited {
			t.Errorf("rule %d: domain %q algorithm %v, want edge, fixed_window", i, r.Match.Domain, r.Algorithm)
		}
	}
	if d := s.Rules[4].Description; !strings.Contains(d, "detailed_metric") || !strings.Contains(d, "edge.yaml") {
		t.Errorf("description %q, want the file and detailed_metric", d)
	}

	// What import writes, the rules file reads back the same.
	back, b := yamlRoundTrip(t, s)
	if !reflect.DeepEqual(back.Rules, s.Rules) {
		t.Errorf("rules file round trip:\n%s\ngot  %+v\nwant %+v", b, back.Rules, s.Rules)
	}
}

func TestImportEnvoyRefuses(t *testing.T) {
	limit := func(extra string) string {
		return "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n" + extra
	}
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown key", "domain: d\ndescriptors:\n  - key: k\n    limit: 3\n", `f.yaml: line 4: k: unknown key "limit"`},
		{"unknown rate_limit key", limit("      burst: 3\n"), `f.yaml: line 7: k: rate_limit: unknown key "burst"; envoyproxy/ratelimit's configuration knows only domain, key,`},
		{"no key", "domain: d\ndescriptors:\n  - value: v\n", "f.yaml: line 3: =v: key: required"},
		{"no domain", "descriptors: []\n", "domain: required"},
		{"bad unit", strings.Replace(limit(""), "minute", "fortnight", 1), `f.yaml: line 5: k: rate_limit.unit: want one of second, minute, hour, day, week, month, year (any letter case), got "fortnight"`},
		{"negative", strings.Replace(limit(""), "5", "-1", 1), "requests_per_unit: want a whole number from 0 to 4294967295, got -1"},
		{"unlimited with a unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: second\n",
			"f.yaml: line 6: k: rate_limit.unit: an unlimited rate_limit takes no unit; remove unit or unlimited"},
		{"unlimited not a bool", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: yes please\n", "f.yaml: line 5: k: rate_limit: unlimited: want true or false, got \"yes please\""},
		{"replaces not a list", limit("      replaces: x\n"), "f.yaml: line 7: k: rate_limit.replaces: want a list of {name: <rate_limit name>}, got \"x\""},
		{"replaces without name", limit("      replaces:\n        - {}\n"), "f.yaml: line 8: k: rate_limit.replaces: name: required, the name of the rate_limit to replace"},
		{"replaces unknown key", limit("      replaces:\n        - nom: x\n"), `f.yaml: line 8: k: rate_limit: replaces: unknown key "nom"`},
		{"replaces itself", limit("      name: me\n      replaces:\n        - name: me\n"), `f.yaml: line 9: k: rate_limit.replaces: "me" is this rate_limit's own name; remove it`},
		{"quota_mode not a bool", limit("    quota_mode: \"true\"\n"), `f.yaml: line 7: k: quota_mode: want true or false, got "true"`},
		{"metadata not a mapping", limit("    metadata: x\n"), `f.yaml: line 7: k: metadata: want a mapping, got "x"`},
		{"empty file", "", "f.yaml: the file is empty; envoyproxy/ratelimit refuses a file without a domain"},
		{"comments only", "# nothing\n", "the file is empty"},
		{"empty domain", "domain: \"\"\n", "f.yaml: line 1: domain: required, a non-empty string"},
		{"fraction", strings.Replace(limit(""), "5", "5.5", 1), "f.yaml: line 6: k: rate_limit: requests_per_unit: want a whole number, a string or true/false, got 5.5"},
		{"fractional value", "domain: d\ndescriptors:\n  - key: k\n    value: 1.5\n", "f.yaml: line 4: k=1.5: value: want a whole number, a string or true/false, got 1.5"},
		{"past uint32", strings.Replace(limit(""), "5", "4294967296", 1), "requests_per_unit: want a whole number from 0 to 4294967295, got 4294967296"},
		{"quoted number", strings.Replace(limit(""), "5", "\"5\"", 1), `requests_per_unit: want a whole number from 0 to 4294967295, got "5"`},
		{"list of strings", "domain: d\ndescriptors:\n  - a\n", "f.yaml: line 3: a list here holds mappings only"},
		{"descriptors a mapping", "domain: d\ndescriptors:\n  key: k\n", "f.yaml: line 3: descriptors: want a list, got an object"},
		{"unit unknown", strings.Replace(limit(""), "minute", "UNKNOWN", 1), `rate_limit.unit: want one of second`},
		{"no unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {}\n", "f.yaml: line 4: k: rate_limit.unit: required"},
		{"duplicate composite key", "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n",
			`f.yaml: line 5: k=v: a descriptor of this level already has key and value "k_v"`},
		{"duplicate composite key across forms", "domain: d\ndescriptors:\n  - key: a_b\n  - key: a\n    value: b\n", `"a_b"`},
		{"share_threshold without wildcard", limit("    share_threshold: true\n"), `f.yaml: line 7: k: share_threshold: only on a wildcard value`},
		{"not yaml", "domain: [\n", "f.yaml: invalid YAML"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := importEnvoy([]File{{Name: "f.yaml", Data: []byte(tt.yaml)}})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ImportEnvoy = %v, want an error containing %q", err, tt.want)
			}
		})
	}
	one := []byte("domain: d\n")
	_, err := importEnvoy([]File{{"a.yaml", one}, {"b.yaml", one}})
	if err == nil || !strings.Contains(err.Error(), `b.yaml: line 1: domain "d" is also the domain of a.yaml; a domain is one file (set MERGE_DOMAIN_CONFIG=true`) {
		t.Errorf("two files of one domain: %v", err)
	}
}

func TestMatchEntries(t *testing.T) {
	s, err := importEnvoy([]File{{Name: "edge.yaml", Data: []byte(envoyNested + `
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: ip
    value: 50.0.0.5
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 1}
`)}})
	if err != nil {
		t.Fatal(err)
	}
	s.Rules = append(s.Rules, rules.Rule{ID: "other", Match: rules.Match{Domain: "other", Entries: []rules.Entry{{Key: "tenant", Value: ""}}}, Limit: 1, Window: rules.Duration(time.Second)})
	ix, err := rules.Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	e := func(kv ...string) []rules.Entry {
		var es []rules.Entry
		for i := 0; i < len(kv); i += 2 {
			es = append(es, rules.Entry{Key: kv[i], Value: kv[i+1]})
		}
		return es
	}
	tests := []struct {
		name    string
		domain  string
		entries []rules.Entry
		want    []string
	}{
		{"nested exact", "edge", e("source_cluster", "front", "destination_cluster", "books"), []string{"edge.1"}},
		{"placeholder alone has no limit", "edge", e("source_cluster", "front"), nil},
		{"nested other value", "edge", e("source_cluster", "front", "destination_cluster", "films"), nil},
		{"any value", "edge", e("tenant", "acme"), []string{"edge.2"}},
		{"any, then any", "edge", e("tenant", "acme", "path", "/x"), []string{"edge.3"}},
		{"exact beats any", "edge", e("tenant", "acme", "path", "/slow"), []string{"tenant-slow"}},
		{"order matters", "edge", e("path", "/x", "tenant", "acme"), nil},
		{"longer than any rule", "edge", e("tenant", "acme", "path", "/x", "more", "1"), nil},
		{"wildcard", "edge", e("region", "eu-west"), []string{"edge.5"}},
		{"wildcard misses", "edge", e("region", "us-east"), nil},
		{"exact ip wins, no fallback to the key", "edge", e("ip", "50.0.0.5"), nil},
		{"key-only ip", "edge", e("ip", "50.0.0.6"), []string{"edge.7"}},
		{"exact ip nested", "edge", e("ip", "50.0.0.5", "user", "u"), []string{"edge.8"}},
		{"a leaf without rate_limit is matched (unlimited)", "edge", e("plain_key", "42"), []string{"edge.6"}},
		{"other domain", "other", e("tenant", "acme"), []string{"other"}},
		{"unknown domain", "nope", e("tenant", "acme"), nil},
		{"unknown key", "edge", e("generic_key", "x"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ix.Domain(tt.domain).MatchEntries(tt.entries, nil)
			var ids []string
			for _, c := range got {
				ids = append(ids, c.ID)
			}
			if !reflect.DeepEqual(ids, tt.want) {
				t.Errorf("MatchEntries(%v) = %v, want %v", tt.entries, ids, tt.want)
			}
		})
	}
	// The HTTP API's Match never sees a rule on entries.
	if got := ix.Match("", "GET", "/", nil); len(got) != 0 {
		t.Errorf("Match = %d rules, want none", len(got))
	}
	es, v := e("tenant", "acme", "path", "/slow"), ix.Domain("edge")
	var dst [4]*rules.Compiled
	if n := testing.AllocsPerRun(100, func() { v.MatchEntries(es, dst[:0]) }); n != 0 {
		t.Errorf("MatchEntries allocates %v times, want 0", n)
	}
}

// TestImportEnvoyMany: a domain of many limits loads — at most one node's
// rules apply to a descriptor, so they are not counted together against
// MaxRulesPerCall.
func TestImportEnvoyMany(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: big\ndescriptors:\n")
	for i := range 500 {
		fmt.Fprintf(&b, "  - key: k\n    value: v%d\n    rate_limit: {unit: second, requests_per_unit: %d}\n", i, i+1)
	}
	s, err := importEnvoy([]File{{Name: "big.yaml", Data: []byte(b.String())}})
	if err != nil {
		t.Fatal(err)
	}
	ix, err := rules.Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	got := ix.Domain("big").MatchEntries([]rules.Entry{{Key: "k", Value: "v499"}}, nil)
	if len(got) != 1 || got[0].Limit != 500 {
		t.Errorf("MatchEntries(k=v499) = %v, want the one rule of 500", got)
	}
}

// TestLoadEnvoyAsEnvoyproxy: what envoyproxy/ratelimit's loader accepts
// loads, read as it reads it.
func TestLoadEnvoyAsEnvoyproxy(t *testing.T) {
	const conf = `domain: default/eg/https
descriptors:
  - key: k
    value: 017
    shadow_mode: yes
    quota_mode: on
    metadata:
      team: {name: a, size: 1.5}
    rate_limit:
      unit: MINUTE
      requests_per_unit: 4294967295
  - key: n
    value: true
    rate_limit:
      unit: Second
      requests_per_unit: 1_000
    unit: hour
  - key: n
    rate_limit: ~
    shadow_mode: false
    shadow_mode: true
`
	s, notes, err := Load([]File{{Name: "eg.yaml", Data: []byte(conf)}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		id            string
		entries       []rules.Entry
		limit         int64
		window        time.Duration
		shadow, quota bool
		unlimited     bool
	}
	wants := []want{
		{"default-eg-https.1", []rules.Entry{{Key: "k", Value: "017"}}, 4294967295, time.Minute, true, true, false},
		{"default-eg-https.2", []rules.Entry{{Key: "n", Value: "true"}}, 1000, time.Second, false, false, false},
		{"default-eg-https.3", []rules.Entry{{Key: "n", Value: ""}}, 0, 0, true, false, true},
	}
	if len(s.Rules) != len(wants) {
		t.Fatalf("Load made %d rules, want %d: %+v", len(s.Rules), len(wants), s.Rules)
	}
	for i, w := range wants {
		r := s.Rules[i]
		got := want{r.ID, r.Match.Entries, r.Limit, time.Duration(r.Window), r.Shadow, r.Quota, r.Unlimited}
		if !reflect.DeepEqual(got, w) || r.Match.Domain != "default/eg/https" {
			t.Errorf("rule %d = %+v in %q, want %+v", i, got, r.Match.Domain, w)
		}
	}
	if len(notes) != 1 || !strings.Contains(notes[0], `eg.yaml: line 17: n=true: "unit" has no meaning here`) {
		t.Errorf("notes = %q, want the misplaced unit", notes)
	}
	if _, err := rules.Compile(s); err != nil {
		t.Fatal(err)
	}
	back, out := yamlRoundTrip(t, s)
	if !reflect.DeepEqual(back.Rules, s.Rules) {
		t.Errorf("round trip:\n%s", out)
	}
}

// TestLoadEnvoyMergeDomains: with MERGE_DOMAIN_CONFIG the files of a
// domain add up, and a top-level descriptor two files give is refused.
func TestLoadEnvoyMergeDomains(t *testing.T) {
	a := []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	b := []byte("domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 2}\n")
	s, _, err := Load([]File{{"a.yaml", a}, {"b.yaml", b}}, Options{MergeDomains: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Rules) != 2 || s.Rules[1].ID != "d.2" || s.Rules[1].Limit != 2 {
		t.Errorf("merged rules = %+v, want d.1 and d.2", s.Rules)
	}
	_, _, err = Load([]File{{"a.yaml", a}, {"a2.yaml", a}}, Options{MergeDomains: true})
	if err == nil || !strings.Contains(err.Error(), `a2.yaml: line 3: a: a descriptor of this level already has key and value "a"`) {
		t.Errorf("merged duplicate = %v, want the composite key refused", err)
	}
}

// TestLoadEnvoyGlobalModes: SHADOW_MODE and QUOTA_MODE make every rule
// shadow or quota, unlimited ones included, and the set still validates.
func TestLoadEnvoyGlobalModes(t *testing.T) {
	conf := []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unlimited: true}\n")
	s, _, err := Load([]File{{"d.yaml", conf}}, Options{Shadow: true, Quota: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range s.Rules {
		if !r.Shadow || !r.Quota {
			t.Errorf("rule %s: shadow %v, quota %v; want both", r.ID, r.Shadow, r.Quota)
		}
	}
	if _, err := rules.Compile(s); err != nil {
		t.Fatal(err)
	}
}

func importEnvoy(files []File) (*rules.Set, error) {
	s, _, err := Load(files, Options{})
	return s, err
}

// yamlRoundTrip encodes s as a rules file and parses it back.
func yamlRoundTrip(t *testing.T, s *rules.Set) (*rules.Set, []byte) {
	t.Helper()
	b, err := rules.EncodeYAML(s)
	if err != nil {
		t.Fatalf("EncodeYAML(%+v) = %v", s, err)
	}
	back, err := rules.ParseYAML(b)
	if err != nil {
		t.Fatalf("ParseYAML(EncodeYAML(s)) = %v\n%s", err, b)
	}
	return back, b
}
