package rules

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
)

const ruleFieldList = "id, description, match, by, limit, window, burst, algorithm, max_reserve_wait, failure_mode, charge, lease, shadow, quota, enabled, unlimited, name, replaces"

func TestDecodeRuleJSON(t *testing.T) {
	got, err := decodeRuleJSON([]byte(`{
		"id": "free-per-user", "description": "Free plan", "match": {"plan": "free", "endpoint": "GET /api/*"},
		"by": "user", "limit": 100, "window": "1m", "burst": 150, "algorithm": "token_bucket",
		"failure_mode": "closed", "shadow": true, "enabled": false}`))
	want := Rule{
		ID: "free-per-user", Description: "Free plan", Match: Match{Plan: "free", Endpoint: "GET /api/*"},
		By: ByUser, Limit: 100, Window: Duration(time.Minute), Burst: 150, Algorithm: algorithm.TokenBucket,
		FailureMode: FailClosed, Shadow: true, Enabled: ptr(false),
	}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeRuleJSON() = %+v, %v, want %+v", got, err, want)
	}
	// Optional fields may be null, as encoding/json allows.
	got, err = decodeRuleJSON([]byte(`{"id":"a","limit":1,"window":"7d","algorithm":"sliding_window","match":null,"enabled":null,"burst":null}`))
	want = Rule{ID: "a", Limit: 1, Window: Duration(7 * day), Algorithm: algorithm.SlidingWindow}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeRuleJSON() = %+v, %v, want %+v", got, err, want)
	}
}

func TestDecodeRuleJSONErrors(t *testing.T) {
	const ok = `"id":"a","limit":10,"window":"1m"`
	tests := []struct {
		in   string
		want string // the exact Error()
	}{
		{`{` + ok + `,"foo":1}`, `foo: unknown field, want one of ` + ruleFieldList},
		{`{` + ok + `,"LIMIT":1}`, `LIMIT: unknown field, want one of ` + ruleFieldList},
		{`{` + ok + `,"a b":1}`, `"a b": unknown field, want one of ` + ruleFieldList},
		{`{"id":"a","limit":1.5,"window":"1m"}`, `limit: want an integer, got 1.5`},
		{`{"id":"a","limit":"10","window":"1m"}`, `limit: want an integer, got "10"`},
		{`{"id":"a","limit":1e3,"window":"1m"}`, `limit: want an integer, got 1e3`},
		{`{"id":"a","limit":true,"window":"1m"}`, `limit: want an integer, got true`},
		{`{"id":"a","limit":[1],"window":"1m"}`, `limit: want an integer, got an array`},
		{`{"id":"a","limit":99999999999999999999,"window":"1m"}`, `limit: want an integer in range, got 99999999999999999999`},
		{`{"id":"a","limit":-1,"window":"1m"}`, `limit: must be ≥ 0 (0 denies every call), got -1`},
		{`{"id":"a","window":"1m"}`, `limit: required: the calls admitted per window (0 denies every call), or unlimited: true`},
		{`{"id":"a","limit":null,"window":"1m"}`, `limit: required: the calls admitted per window (0 denies every call), or unlimited: true`},
		{`{"id":"a","unlimited":true,"limit":5}`, `limit: an unlimited rule admits every call: remove limit (got 5) or unlimited`},
		{`{"id":"a","unlimited":true,"window":"1m"}`, `window: an unlimited rule admits every call: remove window (got 1m) or unlimited`},
		{`{"id":"a","limit":0,"window":"1m","burst":2}`, `burst: a rule of limit 0 denies every call: remove burst (got 2)`},
		{`{"id":"a","limit":1,"window":"1m","replaces":"x"}`, `replaces: want a list of rule names, got "x"`},
		{`{"id":"a","limit":1,"window":"1m","replaces":[1]}`, `replaces[0]: want a rule name (a string), got 1`},
		{`{"id":"a","limit":1,"window":"1m","replaces":[""]}`, `replaces[0]: want the name of a rule, got an empty string`},
		{`{"id":"a","limit":1,"window":"1m","name":"x","replaces":["y","x"]}`, `replaces[1]: "x" is the rule's own name: a rule does not replace itself; remove it`},
		{`{"id":"a","limit":1,"window":"1m","name":"a\u0001"}`, `name: must be UTF-8 without control characters, got "a\x01"`},
		{`{"id":"a","limit":10,"limit":11,"window":"1m"}`, `limit: given twice`},
		{`{"id":7,"limit":10,"window":"1m"}`, `id: want a string, got 7`},
		{`{"limit":10,"window":"1m"}`, `id: required`},
		{`{` + ok + `,"algorithm":"fast"}`, `algorithm: unknown algorithm "fast", want one of token_bucket, leaky_bucket, fixed_window, sliding_window, sliding_log`},
		{`{"id":"a","limit":10,"window":60}`, `window: want a duration such as "1m", "500ms", "24h" or "7d", got 60`},
		{`{"id":"a","limit":10,"window":"1x"}`, `window: want a duration such as "1m", "500ms", "24h" or "7d", got "1x"`},
		{`{"id":"a","limit":10}`, `window: required, e.g. "1m"`},
		{`{` + ok + `,"match":{"plan":"free","path":"/x"}}`, `match.path: unknown field, want one of domain, plan, endpoint, path_case, headers, entries`},
		{`{` + ok + `,"match":"free"}`, `match: want an object, got "free"`},
		{`{` + ok + `,"match":{"endpoint":"/api/orders"}}`, `match.endpoint: want "METHOD /path", e.g. "GET /api/orders"`},
		{`{` + ok + `,"enabled":"false"}`, `enabled: want true or false, got "false"`},
		{`{` + ok + `,"shadow":1}`, `shadow: want true or false, got 1`},
		{`{` + ok + `,"burst":5,"algorithm":"fixed_window"}`, `burst: only token_bucket and leaky_bucket take a burst; fixed_window admits limit calls per window (remove burst or change the algorithm)`},
		{`{` + ok + `} {}`, `invalid JSON: unexpected data after the value at offset 36`},
		{`{` + ok + `}x`, `invalid JSON: unexpected data after the value at offset 35`},
		{`{"id":"a",}`, `invalid JSON at offset 10: invalid character '}' looking for beginning of object key string`},
		{`{` + ok, `invalid JSON: unexpected end of input`},
		{``, `invalid JSON: empty input`},
		{`[1]`, `want an object at the top level, got an array`},
		{`null`, `want an object at the top level, got null`},
	}
	for _, tt := range tests {
		_, err := decodeRuleJSON([]byte(tt.in))
		if err == nil || err.Error() != tt.want {
			t.Errorf("decodeRuleJSON(%s) = %v, want %q", tt.in, err, tt.want)
		}
	}
	_, err := decodeRuleJSON([]byte(`{"id":"a","limit":1.5,"window":"1m"}`))
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "limit" {
		t.Errorf("DecodeRuleJSON error = %#v, want a *FieldError for limit", err)
	}
}

func TestDecodeSetJSONErrors(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{`{"rules":[{"id":"x","limit":1.5,"window":"1m"}]}`, `rules[0] (id "x").limit: want an integer, got 1.5`},
		{`{"rules":[{"id":"x","limit":1,"window":"1m"},{"limit":1,"window":"1m","bogus":1}]}`, `rules[1].bogus: unknown field, want one of ` + ruleFieldList},
		{`{"rules":[{"id":"x","limit":1,"window":"1m"},{"id":"y","limit":1,"window":"1m","match":{"endpoint":7}}]}`, `rules[1] (id "y").match.endpoint: want a string, got 7`},
		{`{"rules":[{"id":"x","limit":1,"window":"1m"},{"id":"x","limit":1,"window":"1m"}]}`, `rules[1] (id "x").id: duplicate of rules[0]`},
		{`{"rules":[7]}`, `rules[0]: want an object, got 7`},
		{`{"rules":{}}`, `rules: want a list of rules, got an object`},
		{`{"rules":[],"clients":{"user:a":{"plan":"p","x":1}}}`, `clients["user:a"].x: unknown field, want one of plan`},
		{`{"rules":[],"clients":{"user:a":"p"}}`, `clients["user:a"]: want an object, got "p"`},
		{`{"rules":[],"clients":{"user:a":{"plan":"p"},"user:a":{"plan":"q"}}}`, `clients["user:a"]: given twice`},
		{`{"rules":[],"clients":{"bob":{"plan":"p"}}}`, `clients["bob"]: want "user:<id>", "api_key:<key>" or "ip:<address or prefix>", got "bob"`},
		{`{"rules":[],"revision":"1"}`, `revision: want an integer, got "1"`},
		{`{"rules":[],"defaultPlan":"x"}`, `defaultPlan: unknown field, want one of revision, default_plan, rules, clients`},
		{`null`, `want an object at the top level, got null`},
	}
	for _, tt := range tests {
		_, err := decodeSetJSON([]byte(tt.in))
		if err == nil || err.Error() != tt.want {
			t.Errorf("decodeSetJSON(%s) = %v, want %q", tt.in, err, tt.want)
		}
	}
}

func exampleSet() *Set {
	return &Set{
		Revision:    7,
		DefaultPlan: "free",
		Rules: []Rule{
			{ID: "free-per-user", Description: "Free plan, 100 calls a minute per caller", Match: Match{Plan: "free"},
				By: ByClient, Limit: 100, Window: Duration(time.Minute), Burst: 100, Algorithm: algorithm.TokenBucket,
				FailureMode: FailOpen, Enabled: ptr(true)},
			{ID: "login", Match: Match{Endpoint: "POST /login"}, By: ByIP, Limit: 5, Window: Duration(time.Minute),
				Algorithm: algorithm.SlidingLog, FailureMode: FailClosed},
			{ID: "api-any", Match: Match{Plan: "partner", Endpoint: "* /api/*"}, Limit: 1000, Window: Duration(7 * day),
				Algorithm: algorithm.FixedWindow, Shadow: true, Enabled: ptr(false)},
			{ID: "odd.strings_1", Description: "true", Match: Match{Plan: "10", Endpoint: "GET /a:b/#c/'d\"/*"}, Limit: 1,
				Window: Duration(1500 * time.Millisecond), Algorithm: algorithm.LeakyBucket, Burst: 3},
			{ID: "tenant-writes", Match: Match{Endpoint: "PUT|PATCH|DELETE /api/*", Headers: map[string]string{"X-Tenant": "acme", "x-env": "prod-*", "X-Internal": "*", "X-Odd": "true"}},
				By: "header:x-tenant", Limit: 50, Window: Duration(time.Minute), Algorithm: algorithm.TokenBucket},
			{ID: "multi-line", Description: "line one\nline two: with colon\n  indented\ttab\n", Limit: 1, Window: Duration(time.Second),
				Algorithm: algorithm.SlidingWindow},
			{ID: "blocked", Match: Match{Endpoint: "* /admin/*"}, By: ByIP, Limit: 0, Window: Duration(time.Minute),
				Algorithm: algorithm.FixedWindow, Name: "Blocked: admin", Replaces: []string{"true", "10", "x y"}},
			{ID: "free-health", Match: Match{Endpoint: "GET /health"}, Unlimited: true, Replaces: []string{"Blocked: admin"}},
		},
		Clients: map[string]Client{
			"api_key:k_live_42": {Plan: "partner"},
			"user:alice":        {Plan: "pro"},
			"ip:2001:db8::/64":  {Plan: "free"},
			"user:bob # not":    {Plan: "null"},
		},
	}
}

func TestJSONRoundTrip(t *testing.T) {
	s := exampleSet()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeSetJSON(b)
	if err != nil {
		t.Fatalf("decodeSetJSON(%s) = %v", b, err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Errorf("decodeSetJSON(json.Marshal(s)) = %+v, want %+v", got, s)
	}
	if !strings.Contains(string(b), `"enabled":false`) || !strings.Contains(string(b), `"window":"7d"`) {
		t.Errorf("json.Marshal(s) = %s, want enabled false and window 7d written out", b)
	}
	for i, r := range s.Rules {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeRuleJSON(b)
		if err != nil || !reflect.DeepEqual(got, r) {
			t.Errorf("rule %d: decodeRuleJSON(%s) = %+v, %v, want %+v", i, b, got, err, r)
		}
	}
}

func TestYAMLRoundTrip(t *testing.T) {
	s := exampleSet()
	got, b := yamlRoundTrip(t, s)
	if !reflect.DeepEqual(got, s) {
		t.Errorf("ParseYAML(EncodeYAML(s)) = %+v, want %+v\n%s", got, s, b)
	}
	if !strings.Contains(string(b), "enabled: false") {
		t.Errorf("EncodeYAML(s) has no `enabled: false`:\n%s", b)
	}
	empty, err := EncodeYAML(&Set{})
	if err != nil || string(empty) != "rules: []\n" {
		t.Errorf("EncodeYAML(empty) = %q, %v, want %q", empty, err, "rules: []\n")
	}
}

// yamlRoundTrip writes s as a rules file and reads it back, and fails the
// test when either step fails; it returns what was read and the file.
func yamlRoundTrip(t *testing.T, s *Set) (*Set, []byte) {
	t.Helper()
	b, err := EncodeYAML(s)
	if err != nil {
		t.Fatalf("EncodeYAML(%+v) = %v", s, err)
	}
	back, err := ParseYAML(b)
	if err != nil {
		t.Fatalf("ParseYAML(EncodeYAML(s)) = %v\n%s", err, b)
	}
	return back, b
}

func TestEncodeYAML(t *testing.T) {
	s := &Set{
		DefaultPlan: "free",
		Rules: []Rule{
			{ID: "free-per-user", Description: "Free plan, 100 calls a minute per caller", Match: Match{Plan: "free"},
				By: ByClient, Limit: 100, Window: Duration(time.Minute), Burst: 100, FailureMode: FailOpen},
			{ID: "api", Match: Match{Endpoint: "* /api/*"}, Limit: 10, Window: Duration(time.Second),
				Algorithm: algorithm.FixedWindow, Enabled: ptr(false)},
		},
		Clients: map[string]Client{"user:bob": {Plan: "pro"}, "api_key:k_live_42": {Plan: "partner"}},
	}
	const want = `default_plan: free
rules:
  - id: free-per-user
    description: Free plan, 100 calls a minute per caller
    match: {plan: free}
    by: client
    limit: 100
    window: 1m
    burst: 100
    algorithm: token_bucket
    failure_mode: open
  - id: api
    match: {endpoint: '* /api/*'}
    limit: 10
    window: 1s
    algorithm: fixed_window
    enabled: false
clients:
  api_key:k_live_42: {plan: partner}
  user:bob: {plan: pro}
`
	b, err := EncodeYAML(s)
	if err != nil || string(b) != want {
		t.Errorf("EncodeYAML() = %v\n%s\nwant\n%s", err, b, want)
	}
}

// specExample is the example rules file of docs/api.md#the-rules-file.
const specExample = `rules:
  - id: free-per-user            # [a-z0-9][a-z0-9._-]{0,63}
    description: Free plan, 100 calls a minute per caller
    match: {plan: free}          # optional keys: plan, endpoint ("GET /api/orders",
                                 #   "* /api/*", "POST /login"); absent = any
    by: client                   # client (user, else api_key, else ip) | user | api_key | ip
    limit: 100
    window: 1m
    burst: 100                   # token_bucket / leaky_bucket only
    algorithm: token_bucket
    failure_mode: open           # open | closed
    shadow: false                # true: evaluate, report, never deny
    enabled: true
clients:                         # client → plan; unknown clients get default_plan
  "api_key:k_live_42": {plan: partner}
default_plan: free
`

func TestParseYAMLSpecExample(t *testing.T) {
	got, err := ParseYAML([]byte(specExample))
	if err != nil {
		t.Fatal(err)
	}
	want := &Set{
		DefaultPlan: "free",
		Rules: []Rule{{ID: "free-per-user", Description: "Free plan, 100 calls a minute per caller", Match: Match{Plan: "free"},
			By: ByClient, Limit: 100, Window: Duration(time.Minute), Burst: 100, FailureMode: FailOpen, Enabled: ptr(true)}},
		Clients: map[string]Client{"api_key:k_live_42": {Plan: "partner"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseYAML(spec example) = %+v, want %+v", got, want)
	}
}

func TestParseYAML(t *testing.T) {
	for _, in := range []string{"", "# only a comment\n", "---\n", "rules:\n", "rules: []\n"} {
		s, err := ParseYAML([]byte(in))
		if err != nil || len(s.Rules) != 0 || s.Rules == nil {
			t.Errorf("ParseYAML(%q) = %+v, %v, want an empty set", in, s, err)
		}
	}
	// Anchors and aliases work.
	s, err := ParseYAML([]byte("rules:\n  - &r {id: a, limit: 1, window: 1s, match: &m {plan: free}}\n  - {id: b, limit: 2, window: 1s, match: *m}\n"))
	if err != nil || len(s.Rules) != 2 || s.Rules[1].Match.Plan != "free" {
		t.Errorf("ParseYAML(aliases) = %+v, %v", s, err)
	}
}

func TestParseYAMLErrors(t *testing.T) {
	tests := []struct {
		in   string
		want string // the exact Error()
		line int    // FieldError.Line; 0 = not a *FieldError
	}{
		{"rules:\n  - id: a\n    limit: 1\n    window: 1s\n    colour: red\n",
			`line 5: rules[0] (id "a").colour: unknown field, want one of ` + ruleFieldList, 5},
		{"rules:\n  - id: a\n    limit: 1.5\n    window: 1s\n", `line 3: rules[0] (id "a").limit: want an integer, got 1.5`, 3},
		{"rules:\n  - id: a\n    limit: \"10\"\n    window: 1s\n", `line 3: rules[0] (id "a").limit: want an integer, got "10"`, 3},
		{"rules:\n  - id: a\n    limit: 1\n    window: 1s\n    algorithm: fast\n",
			`line 5: rules[0] (id "a").algorithm: unknown algorithm "fast", want one of token_bucket, leaky_bucket, fixed_window, sliding_window, sliding_log`, 5},
		{"rules:\n  - id: a\n    limit: 1\n    window: 1s\n  - id: b\n    limit: -1\n    window: 1s\n", `line 6: rules[1] (id "b").limit: must be ≥ 0 (0 denies every call), got -1`, 6},
		{"rules:\n  - id: a\n    window: 1s\n", `line 2: rules[0] (id "a").limit: required: the calls admitted per window (0 denies every call), or unlimited: true`, 2},
		{"rules:\n  - id: a\n    limit: 1\n    window: 1s\n  - id: b\n    limit: 1\n", `line 5: rules[1] (id "b").window: required, e.g. "1m"`, 5},
		{"rules:\n  - id: a\n    limit: 1\n    window: 1s\n  - id: a\n    limit: 1\n    window: 1s\n", `line 5: rules[1] (id "a").id: duplicate of rules[0]`, 5},
		{"rules:\n  - id: a\n    limit: 1\n    window: 1s\n    match:\n      endpoint: /api/orders\n",
			`line 6: rules[0] (id "a").match.endpoint: want "METHOD /path", e.g. "GET /api/orders"`, 6},
		{"rules:\n  - id: a\n    limit: 1\n    window: 1s\n    burst: 5\n    algorithm: fixed_window\n",
			`line 5: rules[0] (id "a").burst: only token_bucket and leaky_bucket take a burst; fixed_window admits limit calls per window (remove burst or change the algorithm)`, 5},
		{"rules:\n  - id: a\n    limit: 1\n    window: 1s\n    enabled: yes\n", `line 5: rules[0] (id "a").enabled: want true or false, got "yes"`, 5},
		{"rules:\n  - id: a\n    limit: 1\n    limit: 2\n    window: 1s\n", `line 4: rules[0] (id "a").limit: given twice`, 4},
		{"rules: []\nclients:\n  user:a: {plan: p}\n  bob: {plan: p}\n",
			`line 4: clients["bob"]: want "user:<id>", "api_key:<key>" or "ip:<address or prefix>", got "bob"`, 4},
		{"rules: []\nclients:\n  user:a: {plan: \"no good\"}\n",
			`line 3: clients["user:a"].plan: must be 1 to 64 of A-Z a-z 0-9 . _ - starting with a letter or digit, got "no good"`, 3},
		{"rules: []\ndefault_plan: [a]\n", `line 2: default_plan: want a string, got an array`, 2},
		{"rule: []\n", `line 1: rule: unknown field, want one of revision, default_plan, rules, clients`, 1},
		{"- a\n", `want an object at the top level, got an array`, 0},
		{"rules: [\n", `invalid YAML: line 1: did not find expected node content`, 0},
		{"rules: []\n---\nrules: []\n", `invalid YAML: line 2: a second document; a rules file holds one`, 0},
		{"a: &a [1,1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n",
			`invalid YAML: line 5: aliases expand to too many values`, 0},
	}
	for _, tt := range tests {
		_, err := ParseYAML([]byte(tt.in))
		if err == nil || err.Error() != tt.want {
			t.Errorf("ParseYAML(%q) = %v, want %q", tt.in, err, tt.want)
			continue
		}
		var fe *FieldError
		if errors.As(err, &fe) != (tt.line > 0) || fe != nil && fe.Line != tt.line {
			t.Errorf("ParseYAML(%q) error = %#v, want a *FieldError at line %d", tt.in, err, tt.line)
		}
	}
}

func BenchmarkParseYAML(b *testing.B) {
	s := benchSet(10000)
	s.Clients = make(map[string]Client, 10000)
	for i := range 10000 {
		s.Clients["user:u"+strconv.Itoa(i)] = Client{Plan: "p" + strconv.Itoa(i%100)}
	}
	y, err := EncodeYAML(s)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("rules=10000,clients=10000", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(y)))
		for b.Loop() {
			if _, err := ParseYAML(y); err != nil {
				b.Fatal(err)
			}
		}
	})
}
