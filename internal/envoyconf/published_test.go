package envoyconf

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rules"
)

// TestImportPublishedExamples loads, unchanged, the configurations of
// testdata/envoyproxy — written for this project, one for each
// configuration example envoyproxy/ratelimit publishes, with the features
// it uses — and checks what each descriptor matches and what the rule it
// became does; quota_mode is the rules' quota, and metadata is read.
func TestImportPublishedExamples(t *testing.T) {
	type match struct {
		entries []string // key, value, key, value, ...
		rule    string   // the rule MatchEntries finds, "" for none
	}
	type ruleWant struct {
		limit     int64
		window    time.Duration
		unlimited bool
		by        rules.By
		shadow    bool
		quota     bool
		name      string
		replaces  []string
	}
	tests := []struct {
		file    string
		refused string // the error, "" when the file loads
		rules   map[string]ruleWant
		matches []match
	}{
		{file: "ex01-values.yaml",
			rules: map[string]ruleWant{
				"catalog_qps.1": {limit: 300, window: time.Second, by: rules.ByGlobal},
				"catalog_qps.2": {limit: 300, window: time.Second, by: rules.ByGlobal},
			},
			matches: []match{{[]string{"table", "products"}, "catalog_qps.1"}, {[]string{"table", "fallback"}, "catalog_qps.2"}, {[]string{"table", "other"}, ""}}},
		{file: "ex02-nested.yaml",
			rules: map[string]ruleWant{
				"notify.1": {limit: 2, window: 24 * time.Hour, by: "entry:device_id"},
				"notify.2": {limit: 50, window: 24 * time.Hour, by: "entry:device_id"},
			},
			matches: []match{{[]string{"push_kind", "promotion", "device_id", "d1"}, "notify.1"}, {[]string{"device_id", "d1"}, "notify.2"}, {[]string{"push_kind", "promotion"}, ""}}},
		{file: "ex03-zero.yaml",
			rules: map[string]ruleWant{
				"border_per_ip.1": {limit: 20, window: time.Second, by: "entry:remote_address"},
				"border_per_ip.2": {limit: 0, window: time.Second, by: rules.ByGlobal},
			},
			matches: []match{{[]string{"remote_address", "198.51.100.66"}, "border_per_ip.2"}, {[]string{"remote_address", "198.51.100.67"}, "border_per_ip.1"}}},
		{file: "ex04-depth.yaml",
			rules:   map[string]ruleWant{"depth.1": {limit: 120, window: time.Second, by: "entry:operation"}},
			matches: []match{{[]string{"service", "billing", "operation", "refund"}, "depth.1"}, {[]string{"service", "billing"}, ""}}},
		{file: "ex05-unlimited.yaml",
			rules: map[string]ruleWant{
				"backends.1": {unlimited: true, by: "entry:kerberos"},
				"backends.2": {limit: 600, window: time.Minute, by: "entry:s3"},
			},
			matches: []match{{[]string{"kerberos", "x"}, "backends.1"}, {[]string{"s3", "x"}, "backends.2"}}},
		{file: "ex06-shadow.yaml",
			rules: map[string]ruleWant{
				"shadowed.1": {limit: 15, window: time.Second, by: "entry:app", shadow: true},
				"shadowed.2": {limit: 25, window: time.Second, by: "entry:app"},
			},
			matches: []match{{[]string{"app", "auth", "account", "account-1"}, "shadowed.1"}, {[]string{"app", "auth", "account", "account-3"}, ""}}},
		{file: "ex07-replaces.yaml",
			rules: map[string]ruleWant{
				"acct9_reads": {limit: 6, window: time.Second, by: rules.ByGlobal, name: "acct9_reads"},
				"replacing.2": {limit: 12, window: time.Second, by: rules.ByGlobal, replaces: []string{"acct9_reads"}},
			},
			matches: []match{{[]string{"group_a", "reads", "account", "acct-9"}, "acct9_reads"}, {[]string{"group_b", "writes", "account", "acct-9"}, "replacing.2"}}},
		{file: "ex08-detailed.yaml",
			rules: map[string]ruleWant{
				"detailed.1": {limit: 15, window: time.Minute, by: "entry:tenant"},
				"detailed.2": {limit: 45, window: time.Minute, by: rules.ByGlobal},
			},
			matches: []match{{[]string{"tenant", "small"}, "detailed.1"}, {[]string{"tenant", "big-tenant"}, "detailed.2"}}},
		{file: "ex09-wildcard.yaml",
			rules:   map[string]ruleWant{"wildcard.1": {limit: 30, window: time.Minute, by: "entry:bucket"}},
			matches: []match{{[]string{"bucket", "logs-eu"}, "wildcard.1"}, {[]string{"bucket", "metrics"}, ""}}},
		{file: "ex09-wildcard-middle.yaml",
			rules: map[string]ruleWant{
				"wildcard_middle.1": {limit: 30, window: time.Minute, by: "entry:path"},
				"wildcard_middle.2": {limit: 30, window: time.Minute, by: "entry:resource"},
			},
			matches: []match{
				{[]string{"path", "/v2/42/export"}, "wildcard_middle.1"},
				{[]string{"path", "/v2//export"}, "wildcard_middle.1"},
				{[]string{"path", "/v2/42/other"}, ""},
				{[]string{"path", "/v2/export"}, ""},
				{[]string{"resource", "/v2/a/items/b/export"}, "wildcard_middle.2"},
				{[]string{"resource", "/v2/a/items/export"}, ""},
				{[]string{"resource", "/v2/items/x/items/b/export"}, "wildcard_middle.2"},
			}},
		{file: "ex10-value-to-metric.yaml",
			rules: map[string]ruleWant{
				"per_value_metrics.1": {limit: 90, window: time.Minute, by: "entry:endpoint+entry:verb+entry:principal"},
				"per_value_metrics.2": {limit: 150, window: time.Minute, by: "entry:member+entry:op+entry:collection"},
			},
			matches: []match{{[]string{"endpoint", "/a", "verb", "GET", "principal", "p"}, "per_value_metrics.1"}, {[]string{"member", "m", "op", "listAll", "collection", "c"}, "per_value_metrics.2"}}},
		{file: "ex11-share-threshold.yaml",
			rules: map[string]ruleWant{
				"shared_wildcards.1": {limit: 8, window: time.Hour, by: rules.ByGlobal}, // one bucket for every docs/ value
				"shared_wildcards.2": {limit: 8, window: time.Hour, by: "entry:doc_apart"},
				"shared_wildcards.3": {limit: 40, window: time.Minute, by: "entry:verb"},
			},
			matches: []match{{[]string{"doc", "docs/a.pdf"}, "shared_wildcards.1"}, {[]string{"doc_apart", "docs_apart/a.pdf"}, "shared_wildcards.2"}, {[]string{"api", "v3/users", "verb", "GET"}, "shared_wildcards.3"}}},
		{file: "example-rl.yaml",
			rules: map[string]ruleWant{
				"gw.1":          {limit: 5, window: time.Minute, by: rules.ByGlobal, replaces: []string{"lee", "decoy_limit"}},
				"gw.2":          {limit: 3, window: time.Minute, by: rules.ByGlobal, replaces: []string{"lee"}},
				"gw.4":          {limit: 3, window: time.Minute, by: rules.ByGlobal, replaces: []string{"blocked_limit"}},
				"decoy_limit":   {limit: 3, window: time.Minute, by: rules.ByGlobal, name: "decoy_limit"},
				"gw.6":          {limit: 3, window: time.Minute, by: "entry:alpha"},
				"lee":           {limit: 1, window: time.Minute, by: "entry:alpha", name: "lee"},
				"blocked_limit": {limit: 0, window: time.Minute, by: "entry:alpha", name: "blocked_limit"},
				"gw.12":         {limit: 4, window: time.Minute, by: "entry:alpha", shadow: true},
				"gw.13":         {unlimited: true, by: "entry:alpha+entry:delta"},
				"gw.14":         {limit: 3, window: time.Minute, by: "entry:open_key"},
				"gw.15":         {unlimited: true, by: "entry:free"},
			},
			matches: []match{
				{[]string{"alpha", "a", "beta", "blocked"}, "blocked_limit"},
				{[]string{"alpha", "a", "beta", "x"}, "gw.7"},
				{[]string{"alpha", "a", "gamma", "suspect"}, "gw.12"},
				{[]string{"alpha", "a", "delta", "d"}, "gw.13"},
				{[]string{"origin", "edge", "upstream", "lee"}, "gw.2"},
				{[]string{"free", "f"}, "gw.15"},
			}},
		{file: "example-quota.yaml",
			rules: map[string]ruleWant{
				"gw_quota.1": {limit: 1, window: time.Minute, by: rules.ByGlobal, quota: true},
				"gw_quota.2": {limit: 2, window: time.Minute, by: rules.ByGlobal, quota: true},
			},
			matches: []match{{[]string{"product", "product_a"}, "gw_quota.1"}, {[]string{"product", "product_b"}, "gw_quota.2"}}},
	}
	listed, err := filepath.Glob("testdata/envoyproxy/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		listed = slices.DeleteFunc(listed, func(p string) bool { return filepath.Base(p) == tt.file })
		t.Run(tt.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata/envoyproxy", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			s, err := importEnvoy([]File{{Name: tt.file, Data: b}})
			if tt.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tt.refused) {
					t.Fatalf("ImportEnvoy = %v, want an error containing %q", err, tt.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for id, w := range tt.rules {
				i := slices.IndexFunc(s.Rules, func(r rules.Rule) bool { return r.ID == id })
				if i < 0 {
					t.Errorf("no rule %q in %v", id, ruleIDs(s))
					continue
				}
				r := s.Rules[i]
				got := ruleWant{r.Limit, time.Duration(r.Window), r.Unlimited, r.By, r.Shadow, r.Quota, r.Name, r.Replaces}
				if !reflect.DeepEqual(got, w) {
					t.Errorf("rule %s = %+v, want %+v", id, got, w)
				}
			}
			ix, err := rules.Compile(s)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range tt.matches {
				var es []rules.Entry
				for i := 0; i < len(m.entries); i += 2 {
					es = append(es, rules.Entry{Key: m.entries[i], Value: m.entries[i+1]})
				}
				var got string
				if cs := ix.Domain(s.Rules[0].Match.Domain).MatchEntries(es, nil); len(cs) > 0 {
					got = cs[0].ID
				}
				if got != m.rule {
					t.Errorf("MatchEntries(%v) = %q, want %q", es, got, m.rule)
				}
			}
			// The rules file sluice writes reads back the same.
			back, out := yamlRoundTrip(t, s)
			if !reflect.DeepEqual(back.Rules, s.Rules) {
				t.Errorf("round trip:\n%s", out)
			}
		})
	}
	// A pattern is matched without allocating, as every other value.
	s, err := importEnvoy([]File{{Name: "m.yaml", Data: []byte("domain: m\ndescriptors:\n  - key: p\n    value: /a/*/b/*/c\n    rate_limit: {unit: second, requests_per_unit: 1}\n")}})
	if err != nil {
		t.Fatal(err)
	}
	ix, err := rules.Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	v, es := ix.Domain("m"), []rules.Entry{{Key: "p", Value: "/a/x/b/y/c"}}
	var dst [4]*rules.Compiled
	if got := v.MatchEntries(es, dst[:0]); len(got) != 1 {
		t.Fatalf("MatchEntries(%v) = %d rules, want 1", es, len(got))
	}
	if n := testing.AllocsPerRun(100, func() { v.MatchEntries(es, dst[:0]) }); n != 0 {
		t.Errorf("MatchEntries of a pattern allocates %v times, want 0", n)
	}
	if len(listed) > 0 {
		t.Errorf("testdata/envoyproxy files no test case loads: %v", listed)
	}
}

func ruleIDs(s *rules.Set) []string {
	var ids []string
	for _, r := range s.Rules {
		ids = append(ids, r.ID)
	}
	return ids
}
