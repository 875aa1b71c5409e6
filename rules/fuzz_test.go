package rules

import (
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// maxFuzzInput keeps each fuzz input quick to run.
const maxFuzzInput = 8 << 10

// refMethodFits is the reference for a call's method against an
// endpoint's method or method set ("GET|HEAD").
func refMethodFits(set, method string) bool {
	upper := strings.Map(func(r rune) rune {
		if 'a' <= r && r <= 'z' {
			return r - 'a' + 'A'
		}
		return r
	}, method)
	for _, m := range strings.Split(set, "|") {
		if m == "*" || m == upper || m == "GET" && upper == "HEAD" {
			return true
		}
	}
	return false
}

// refHeadersFit is the reference for match.headers: every header's first
// value, looked up without regard to case, is non-empty and is the value,
// or starts with what comes before a final "*".
func refHeadersFit(want map[string]string, h http.Header) bool {
	for name, v := range want {
		got := ""
		for k, vs := range h {
			if strings.EqualFold(k, name) && len(vs) > 0 {
				got = vs[0]
			}
		}
		if got == "" {
			return false
		}
		if p, ok := strings.CutSuffix(v, "*"); ok {
			if !strings.HasPrefix(got, p) {
				return false
			}
		} else if got != v {
			return false
		}
	}
	return true
}

// refMatches is the reference for Endpoint.Matches, read straight off the
// pattern text.
func refMatches(pattern, method, path string) bool {
	m, p, _ := strings.Cut(pattern, " ")
	if !refMethodFits(m, method) {
		return false
	}
	path = refCleanPath(path)
	base, prefix := strings.CutSuffix(p, "/*")
	base = refCleanPath(base)
	if !prefix {
		return path == base
	}
	if base == "/" {
		base = ""
	}
	return base == "" || path == base || strings.HasPrefix(path, base+"/")
}

func FuzzParseEndpoint(f *testing.F) {
	for _, s := range []string{
		"GET /api/orders", "* /api/*", "POST /login", "* /*", "GET /", "GET //*", "/api/orders",
		"get /x", "GET  /x", "GET /a*", "GET /*/x", "GET /a b", "PROPFIND /dav/*", "GET /ü/*", "GET /\xff",
	} {
		f.Add(s, "GET", "/api/orders")
		f.Add(s, "POST", "/api")
	}
	f.Add("* /api/*", "GET", "/api/")
	f.Add("* /api/*", "GET", "/apix")
	f.Add("GET /a/b/*", "GET", "/a/b/c/d")
	f.Add("* /*", "", "")
	f.Add("GET /api/orders", "head", "/api/./orders;x/")
	f.Add("* /a%2Fb/*", "GET", "/a/b/c")
	f.Add("GET|POST /a/*", "head", "/a/b")
	f.Add("PUT|PATCH|DELETE /a", "patch", "/a")
	f.Add("GET|GET /a", "GET", "/a")
	f.Add("GET|* /a", "GET", "/a")
	f.Add("GET| /a", "GET", "/a")
	f.Add("GET|POST /a", "GET|POST", "/a")
	f.Fuzz(func(t *testing.T, s, method, path string) {
		if len(s)+len(method)+len(path) > maxFuzzInput {
			return
		}
		e, err := parseEndpoint(s)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != "endpoint" {
				t.Fatalf("parseEndpoint(%q) = %#v, want a *FieldError for endpoint", s, err)
			}
			return
		}
		if got := e.String(); got != s {
			t.Fatalf("parseEndpoint(%q).String() = %q, want the input", s, got)
		}
		if e2, err := parseEndpoint(e.String()); err != nil || e2 != e {
			t.Fatalf("parseEndpoint(%q) = %+v, %v, want %+v", e.String(), e2, err, e)
		}
		want := refMatches(s, method, path)
		if got := e.Matches(method, path); got != want {
			t.Fatalf("parseEndpoint(%q).Matches(%q, %q) = %v, want %v", s, method, path, got, want)
		}
		// The index agrees with the matcher.
		ix, err := Compile(&Set{Rules: []Rule{{ID: "r", Match: Match{Endpoint: s}, Limit: 1, Window: Duration(minWindow)}}})
		if err != nil {
			t.Fatalf("Compile(rule with endpoint %q) = %v", s, err)
		}
		if got := len(ix.Match("", method, path, nil)) == 1; got != want {
			t.Fatalf("Index with %q: Match(%q, %q) found the rule = %v, want %v", s, method, path, got, want)
		}
	})
}

func FuzzDecodeRuleJSON(f *testing.F) {
	for _, s := range []string{
		`{"id":"free-per-user","description":"Free plan","match":{"plan":"free","endpoint":"GET /api/*"},"by":"user","limit":100,"window":"1m","burst":150,"algorithm":"token_bucket","failure_mode":"closed","shadow":true,"enabled":false}`,
		`{"id":"a","limit":1,"window":"7d","algorithm":"sliding_log"}`,
		`{"id":"a","limit":1,"window":"1d12h","algorithm":"leaky_bucket","burst":3}`,
		`{"id":"a","limit":1.5,"window":"1m"}`,
		`{"id":"a","limit":"10","window":"1m"}`,
		`{"id":"a","limit":10,"window":"1m","foo":1}`,
		`{"id":"a","limit":10,"window":"1m"} {}`,
		`{"id":"a","limit":10,"window":"1m","description":"line\nline: two\t\"q\" #x"}`,
		`{"id":"a","limit":10,"window":"1m","match":null,"enabled":null}`,
		`{"id":"a","limit":10,"window":60}`,
		`[]`, `null`, ``, `{`, `{"id":"a","id":"b"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > maxFuzzInput {
			return
		}
		r, err := decodeRuleJSON(b)
		if err != nil {
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("decodeRuleJSON(%q) returned a rule that does not validate: %v", b, err)
		}
		out, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("json.Marshal(%+v) = %v", r, err)
		}
		r2, err := decodeRuleJSON(out)
		if err != nil || !reflect.DeepEqual(r2, r) {
			t.Fatalf("decodeRuleJSON(%s) = %+v, %v, want %+v", out, r2, err, r)
		}
		// The same rule survives the rules file too.
		s := &Set{Rules: []Rule{r}}
		y, err := EncodeYAML(s)
		if err != nil {
			t.Fatalf("EncodeYAML(%+v) = %v", s, err)
		}
		if s2, err := ParseYAML(y); err != nil || !reflect.DeepEqual(s2, s) {
			t.Fatalf("ParseYAML(%q) = %+v, %v, want %+v", y, s2, err, s)
		}
	})
}

func FuzzDecodeSetJSON(f *testing.F) {
	for _, s := range []string{
		`{"revision":3,"default_plan":"free","rules":[{"id":"a","limit":1,"window":"1s"},{"id":"b","match":{"plan":"pro","endpoint":"* /api/*"},"limit":5,"window":"1m","enabled":false}],"clients":{"user:alice":{"plan":"pro"},"ip:2001:db8::/64":{"plan":"free"}}}`,
		`{"rules":[]}`,
		`{"rules":[{"id":"a","limit":1,"window":"1s"},{"id":"a","limit":1,"window":"1s"}]}`,
		`{"rules":[],"clients":{"bob":{"plan":"p"}}}`,
		`{"rules":null,"clients":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > maxFuzzInput {
			return
		}
		s, err := decodeSetJSON(b)
		if err != nil {
			return
		}
		checkSet(t, s)
	})
}

func FuzzParseYAML(f *testing.F) {
	f.Add([]byte(specExample))
	for _, s := range []string{
		"rules:\n  - id: a\n    limit: 1\n    window: 1s\n    colour: red\n",
		"rules:\n  - id: a\n    limit: 1.5\n    window: 1s\n",
		"rules:\n  - &r {id: a, limit: 1, window: 1s, match: &m {plan: free}}\n  - {id: b, limit: 2, window: 1s, match: *m}\n",
		"rules:\n  - id: a\n    description: |\n      two\n      lines\n    limit: 1\n    window: 7d\n    enabled: false\n",
		"rules: []\nclients:\n  user:a: {plan: p}\n  \"ip:10.0.0.0/8\": {plan: q}\ndefault_plan: p\nrevision: 9\n",
		"rules: []\n---\nrules: []\n",
		"a: &a [1,1]\nb: [*a,*a]\n",
		"", "~", "- 1\n", "rules: [\n", "<<: {rules: []}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > maxFuzzInput {
			return
		}
		s, err := ParseYAML(b)
		if err != nil {
			return
		}
		checkSet(t, s)
	})
}

// checkSet checks a Set decoded from outside input: it validates, compiles,
// and survives both encodings unchanged.
func checkSet(t *testing.T, s *Set) {
	t.Helper()
	if err := s.Validate(); err != nil {
		t.Fatalf("decoded a Set that does not validate: %v", err)
	}
	if _, err := Compile(s); err != nil {
		t.Fatalf("Compile() = %v", err)
	}
	y, err := EncodeYAML(s)
	if err != nil {
		t.Fatalf("EncodeYAML(%+v) = %v", s, err)
	}
	if s2, err := ParseYAML(y); err != nil || !reflect.DeepEqual(s2, s) {
		t.Fatalf("ParseYAML(EncodeYAML(s)) = %+v, %v, want %+v\n%s", s2, err, s, y)
	}
	j, err := json.Marshal(s)
	if err != nil {
		t.Fatalf("json.Marshal(%+v) = %v", s, err)
	}
	if s2, err := decodeSetJSON(j); err != nil || !reflect.DeepEqual(s2, s) {
		t.Fatalf("decodeSetJSON(%s) = %+v, %v, want %+v", j, s2, err, s)
	}
}
