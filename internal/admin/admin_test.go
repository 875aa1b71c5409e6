package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/rulestore"
	"github.com/sluicehq/sluice/rules"
)

type env struct {
	t    testing.TB
	h    http.Handler
	src  *rulestore.File
	path string
	hdr  http.Header // sent with every request
}

// newEnv serves the admin API over a real rules file in a temp dir.
func newEnv(t testing.TB, cfg Config) *env {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	src, err := rulestore.OpenFile(rulestore.FileConfig{
		Path:   path,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Tick:   func(time.Duration) (<-chan time.Time, func()) { return nil, func() {} },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &env{t: t, h: New(src, cfg), src: src, path: path, hdr: http.Header{}}
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

// json decodes the response body.
func (r resp) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("response body %q is not a JSON object: %v", r.body, err)
	}
	return m
}

func (r resp) String() string { return string(r.body) }

// do sends a request as `sluice rules` and curl on the operator's machine
// do: to Host 127.0.0.1:9090, a body as application/json; kv overrides
// them ("Host", "Content-Type") and adds headers.
func (e *env) do(method, path, body string, kv ...string) resp {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Host = "127.0.0.1:9090"
	if method == "PUT" || method == "POST" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range e.hdr {
		req.Header[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if http.CanonicalHeaderKey(kv[i]) == "Host" {
			req.Host = kv[i+1]
			continue
		}
		req.Header.Set(kv[i], kv[i+1])
	}
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	return resp{rec.Code, rec.Header(), rec.Body.Bytes()}
}

// must checks the status of a response.
func (e *env) must(r resp, status int) resp {
	e.t.Helper()
	if r.status != status {
		e.t.Fatalf("status %d (%s), want %d", r.status, r.body, status)
	}
	return r
}

func revision(t testing.TB, r resp) int64 {
	t.Helper()
	v, ok := r.json(t)["revision"].(float64)
	if !ok {
		t.Fatalf("no revision in %s", r.body)
	}
	return int64(v)
}

func (e *env) revision() int64 { return e.src.Current().Revision() }

const ruleA = `{"limit": 100, "window": "1m", "match": {"plan": "free"}}`

func TestRulesCRUD(t *testing.T) {
	e := newEnv(t, Config{})

	r := e.must(e.do("GET", "/rules", ""), 200)
	if got, want := string(r.body), `{"revision":0,"default_plan":"free","rules":[]}`+"\n"; got != want {
		t.Errorf("GET /rules = %s, want %s", got, want)
	}
	if got := r.header.Get("ETag"); got != `"0"` {
		t.Errorf("ETag = %s, want \"0\"", got)
	}
	if got := r.header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", got)
	}

	r = e.must(e.do("PUT", "/rules/free-per-user", ruleA), 201)
	if got := revision(t, r); got != 1 {
		t.Errorf("PUT (create) revision = %d, want 1", got)
	}
	if got := r.header.Get("ETag"); got != `"1"` {
		t.Errorf("PUT ETag = %s, want \"1\"", got)
	}
	if got := r.header.Get("Location"); got != "/rules/free-per-user" {
		t.Errorf("Location = %q, want /rules/free-per-user", got)
	}
	rule := r.json(t)["rule"].(map[string]any)
	if rule["id"] != "free-per-user" || rule["limit"] != 100.0 || rule["window"] != "1m" || rule["algorithm"] != "token_bucket" {
		t.Errorf("PUT returned rule %v", rule)
	}

	r = e.must(e.do("GET", "/rules/free-per-user", ""), 200)
	if got := r.header.Get("ETag"); got != `"1"` {
		t.Errorf("GET rule ETag = %s, want \"1\"", got)
	}
	if got := r.json(t); !reflect.DeepEqual(got, rule) {
		t.Errorf("GET /rules/free-per-user = %v, want %v", got, rule)
	}

	// Replace: id in the body, same as the path.
	r = e.must(e.do("PUT", "/rules/free-per-user", `{"id": "free-per-user", "limit": 50, "window": "1h", "algorithm": "sliding_window"}`), 200)
	if got := revision(t, r); got != 2 {
		t.Errorf("PUT (replace) revision = %d, want 2", got)
	}
	e.must(e.do("PUT", "/rules/login", `{"limit": 5, "window": "1m", "match": {"endpoint": "POST /login"}, "failure_mode": "closed"}`), 201)

	r = e.must(e.do("GET", "/rules", ""), 200)
	list := r.json(t)
	if list["revision"] != 3.0 || len(list["rules"].([]any)) != 2 {
		t.Errorf("GET /rules = %s, want revision 3 and 2 rules", r)
	}
	if got := list["rules"].([]any)[0].(map[string]any)["limit"]; got != 50.0 {
		t.Errorf("replaced rule limit = %v, want 50", got)
	}

	r = e.must(e.do("DELETE", "/rules/free-per-user", ""), 200)
	if got := revision(t, r); got != 4 {
		t.Errorf("DELETE revision = %d, want 4", got)
	}
	e.must(e.do("GET", "/rules/free-per-user", ""), 404)
	r = e.must(e.do("DELETE", "/rules/free-per-user", ""), 404)
	if got := r.json(t)["error"]; got != "not_found" {
		t.Errorf("DELETE unknown error = %v, want not_found", got)
	}
	if e.revision() != 4 {
		t.Errorf("revision after a 404 DELETE = %d, want 4", e.revision())
	}

	// Persisted: the file holds what the API says.
	b, _ := os.ReadFile(e.path)
	s, err := rules.ParseYAML(b)
	if err != nil {
		t.Fatalf("rules file does not parse: %v\n%s", err, b)
	}
	if s.Revision != 4 || len(s.Rules) != 1 || s.Rules[0].ID != "login" {
		t.Errorf("rules file = %+v, want revision 4 with rule login", s)
	}
}

func TestHead(t *testing.T) {
	e := newEnv(t, Config{})
	r := e.must(e.do("HEAD", "/rules", ""), 200)
	if r.header.Get("ETag") != `"0"` {
		t.Errorf("HEAD /rules ETag = %q, want \"0\"", r.header.Get("ETag"))
	}
}

func TestClientsCRUD(t *testing.T) {
	e := newEnv(t, Config{})
	e.must(e.do("GET", "/clients/user:alice", ""), 404)

	r := e.must(e.do("PUT", "/clients/user:alice", `{"plan": "pro"}`), 201)
	if got, want := string(r.body), `{"revision":1,"id":"user:alice","plan":"pro"}`+"\n"; got != want {
		t.Errorf("PUT client = %s, want %s", got, want)
	}
	e.must(e.do("PUT", "/clients/user:alice", `{"plan": "partner"}`), 200)
	// An IPv6 prefix, slash and all, raw or escaped.
	e.must(e.do("PUT", "/clients/ip:2001:db8::/64", `{"plan": "free"}`), 201)
	r = e.must(e.do("GET", "/clients/ip:2001:db8::%2F64", ""), 200)
	if got := string(r.body); got != `{"plan":"free"}`+"\n" {
		t.Errorf("GET client = %s", got)
	}

	r = e.must(e.do("GET", "/clients", ""), 200)
	want := `{"revision":3,"default_plan":"free","clients":{"ip:2001:db8::/64":{"plan":"free"},"user:alice":{"plan":"partner"}}}` + "\n"
	if got := string(r.body); got != want {
		t.Errorf("GET /clients = %s, want %s", got, want)
	}
	if r.header.Get("ETag") != `"3"` {
		t.Errorf("ETag = %s, want \"3\"", r.header.Get("ETag"))
	}
	if got := e.src.Current().Plan("", "user:alice", "", ""); got != "partner" {
		t.Errorf("Plan(user:alice) = %q, want partner", got)
	}

	r = e.must(e.do("DELETE", "/clients/user:alice", ""), 200)
	if got := revision(t, r); got != 4 {
		t.Errorf("DELETE client revision = %d, want 4", got)
	}
	e.must(e.do("DELETE", "/clients/user:alice", ""), 404)
	e.must(e.do("GET", "/clients/user:alice", ""), 404)
}

func TestDefaultPlan(t *testing.T) {
	e := newEnv(t, Config{})
	r := e.must(e.do("PUT", "/default_plan", `{"plan": "basic"}`), 200)
	if got := revision(t, r); got != 1 {
		t.Errorf("revision = %d, want 1", got)
	}
	r = e.must(e.do("GET", "/default_plan", ""), 200)
	if got := string(r.body); got != `{"revision":1,"plan":"basic"}`+"\n" {
		t.Errorf("GET /default_plan = %s", got)
	}
	for _, body := range []string{`{"plan": "no spaces"}`, `{}`, `{"plan": 3}`} {
		r := e.must(e.do("PUT", "/default_plan", body), 400)
		if msg := r.json(t)["message"].(string); !strings.Contains(msg, "plan") {
			t.Errorf("PUT /default_plan %s message = %q, want it to name plan", body, msg)
		}
	}
	if e.revision() != 1 {
		t.Errorf("revision after bad requests = %d, want 1", e.revision())
	}
}

func TestPutRuleInvalid(t *testing.T) {
	tests := []struct {
		name string
		path string
		body string
		want []string // in the message
	}{
		{"malformed JSON", "/rules/a", `{"limit": 100, "window": "1m"`, []string{"body", "JSON"}},
		{"not JSON", "/rules/a", `limit=100`, []string{"body", "JSON"}},
		{"empty body", "/rules/a", ``, []string{"body"}},
		{"trailing data", "/rules/a", `{"limit": 1, "window": "1m"} {}`, []string{"body"}},
		{"unknown algorithm", "/rules/a", `{"limit": 100, "window": "1m", "algorithm": "magic"}`, []string{"algorithm", "magic"}},
		{"limit -1", "/rules/a", `{"limit": -1, "window": "1m"}`, []string{"limit"}},
		{"limit -5", "/rules/a", `{"limit": -5, "window": "1m"}`, []string{"limit", "-5"}},
		{"limit missing", "/rules/a", `{"window": "1m"}`, []string{"limit"}},
		{"limit a string", "/rules/a", `{"limit": "ten", "window": "1m"}`, []string{"limit", "integer"}},
		{"limit fractional", "/rules/a", `{"limit": 1.5, "window": "1m"}`, []string{"limit"}},
		{"bad window", "/rules/a", `{"limit": 1, "window": "soon"}`, []string{"window"}},
		{"endpoint without method", "/rules/a", `{"limit": 1, "window": "1m", "match": {"endpoint": "/api/orders"}}`, []string{"match.endpoint"}},
		{"unknown field", "/rules/a", `{"limit": 1, "window": "1m", "limt": 2}`, []string{"limt"}},
		{"id mismatch", "/rules/a", `{"id": "b", "limit": 1, "window": "1m"}`, []string{"id", `"a"`, `"b"`}},
		{"bad path id", "/rules/Bad!", `{"limit": 1, "window": "1m"}`, []string{"id"}},
		{"burst on fixed window", "/rules/a", `{"limit": 1, "window": "1m", "burst": 5, "algorithm": "fixed_window"}`, []string{"burst"}},
		{"array", "/rules/a", `[]`, []string{"object"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, Config{})
			before, _ := os.ReadFile(e.path)
			r := e.do("PUT", tt.path, tt.body)
			if r.status != 400 {
				t.Fatalf("PUT %s %s = %d %s, want 400", tt.path, tt.body, r.status, r)
			}
			m := r.json(t)
			if m["error"] != "invalid_request" {
				t.Errorf("error = %v, want invalid_request", m["error"])
			}
			msg, _ := m["message"].(string)
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message = %q, want it to contain %q", msg, w)
				}
			}
			if e.revision() != 0 {
				t.Errorf("revision = %d after a 400, want 0", e.revision())
			}
			if after, _ := os.ReadFile(e.path); !bytes.Equal(after, before) {
				t.Errorf("rules file changed after a 400")
			}
		})
	}
}

func TestPutClientInvalid(t *testing.T) {
	tests := []struct {
		name, path, body string
		want             string
	}{
		{"no kind", "/clients/alice", `{"plan": "pro"}`, "client"},
		{"bad ip", "/clients/ip:300.1.1.1", `{"plan": "pro"}`, "client"},
		{"non-canonical ip", "/clients/ip:2001:DB8::1", `{"plan": "pro"}`, "canonical"},
		{"no plan", "/clients/user:a", `{}`, "plan"},
		{"empty plan", "/clients/user:a", `{"plan": ""}`, "plan"},
		{"bad plan", "/clients/user:a", `{"plan": "a b"}`, "plan"},
		{"plan a number", "/clients/user:a", `{"plan": 5}`, "plan"},
		{"unknown field", "/clients/user:a", `{"plan": "pro", "tier": 1}`, "tier"},
		{"malformed", "/clients/user:a", `{"plan": `, "body"},
		{"trailing", "/clients/user:a", `{"plan": "pro"} x`, "body"},
		{"array", "/clients/user:a", `["pro"]`, "body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, Config{})
			r := e.must(e.do("PUT", tt.path, tt.body), 400)
			if msg := r.json(t)["message"].(string); !strings.Contains(msg, tt.want) {
				t.Errorf("message = %q, want it to contain %q", msg, tt.want)
			}
			if e.revision() != 0 {
				t.Errorf("revision = %d after a 400, want 0", e.revision())
			}
		})
	}
}

func TestBodyTooLarge(t *testing.T) {
	e := newEnv(t, Config{})
	big := `{"description": "` + strings.Repeat("x", 2<<20) + `", "limit": 1, "window": "1m"}`
	for _, target := range []struct{ method, path string }{
		{"PUT", "/rules/a"}, {"PUT", "/clients/user:a"}, {"POST", "/apply"}, {"PUT", "/default_plan"},
	} {
		r := e.do(target.method, target.path, big)
		if r.status != 413 || r.json(t)["error"] != "payload_too_large" {
			t.Errorf("%s %s with 2 MiB = %d %.100s, want 413 payload_too_large", target.method, target.path, r.status, r)
		}
	}
	small := newEnv(t, Config{MaxBody: 10})
	if r := small.do("PUT", "/rules/a", ruleA); r.status != 413 {
		t.Errorf("PUT with MaxBody 10 = %d, want 413", r.status)
	}
	if e.revision() != 0 {
		t.Errorf("revision = %d, want 0", e.revision())
	}
}

func TestAuth(t *testing.T) {
	e := newEnv(t, Config{Token: "s3cret"})
	tests := []struct {
		name   string
		auth   string
		status int
	}{
		{"missing", "", 401},
		{"wrong", "Bearer nope", 401},
		{"prefix of token", "Bearer s3cre", 401},
		{"not bearer", "Basic czNjcmV0", 401},
		{"token without scheme", "s3cret", 401},
		{"right", "Bearer s3cret", 200},
		{"scheme case", "bearer s3cret", 200},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Each case PUTs a limit of its own: the same rule again would
			// store nothing.
			put := `{"limit": ` + strconv.Itoa(i+1) + `, "window": "1m"}`
			for _, target := range []struct{ method, path, body string }{
				{"GET", "/rules", ""}, {"PUT", "/rules/a", put}, {"GET", "/nowhere", ""},
			} {
				r := e.do(target.method, target.path, target.body, "Authorization", tt.auth)
				want := tt.status
				if want == 200 && target.method == "PUT" {
					want = r.status // 200 or 201
				}
				if target.path == "/nowhere" && want == 200 {
					want = 404
				}
				if r.status != want {
					t.Errorf("%s %s with %q = %d, want %d", target.method, target.path, tt.auth, r.status, want)
				}
				if want == 401 {
					if got := r.header.Get("WWW-Authenticate"); got != "Bearer" {
						t.Errorf("WWW-Authenticate = %q, want Bearer", got)
					}
					if got := r.json(t)["error"]; got != "unauthorized" {
						t.Errorf("error = %v, want unauthorized", got)
					}
					// Which setting the token must come from.
					if got, _ := r.json(t)["message"].(string); !strings.Contains(got, "--admin-token (SLUICE_ADMIN_TOKEN)") {
						t.Errorf("message = %q, want it to name --admin-token (SLUICE_ADMIN_TOKEN)", got)
					}
				}
			}
		})
	}
	if e.revision() != 2 {
		t.Errorf("revision = %d, want 2 (only the authorized PUTs)", e.revision())
	}
}

func TestIfMatch(t *testing.T) {
	e := newEnv(t, Config{})
	e.must(e.do("PUT", "/rules/a", ruleA, "If-Match", `"0"`), 201)
	r := e.must(e.do("PUT", "/rules/a", ruleA, "If-Match", `"0"`), 412)
	m := r.json(t)
	if m["error"] != "precondition_failed" || !strings.Contains(m["message"].(string), "1") {
		t.Errorf("stale If-Match = %s, want precondition_failed naming revision 1", r)
	}
	for _, h := range []string{`"abc"`, `W/"1"`, `"-1"`} {
		e.must(e.do("PUT", "/rules/a", ruleA, "If-Match", h), 412)
	}
	e.must(e.do("DELETE", "/rules/a", "", "If-Match", `"7"`), 412)
	e.must(e.do("PUT", "/clients/user:a", `{"plan":"pro"}`, "If-Match", `"7"`), 412)
	e.must(e.do("PUT", "/default_plan", `{"plan":"pro"}`, "If-Match", `"7"`), 412)
	e.must(e.do("POST", "/apply", `{"rules": []}`, "If-Match", `"7"`), 412)
	e.must(e.do("POST", "/apply?dry_run=true", `{"rules": []}`, "If-Match", `"7"`), 412)
	if e.revision() != 1 {
		t.Fatalf("revision after 412s = %d, want 1", e.revision())
	}
	e.must(e.do("PUT", "/rules/a", ruleA, "If-Match", `"1"`), 200)
	e.must(e.do("PUT", "/rules/a", `{"limit": 5, "window": "1m"}`, "If-Match", `*`), 200)
	e.must(e.do("DELETE", "/rules/a", "", "If-Match", `"2"`), 200)
}

func TestMethodNotAllowed(t *testing.T) {
	e := newEnv(t, Config{})
	tests := []struct{ method, path, allow string }{
		{"POST", "/rules", "GET, HEAD"},
		{"PATCH", "/rules/a", "DELETE, GET, HEAD, PUT"},
		{"GET", "/apply", "POST"},
		{"DELETE", "/default_plan", "GET, HEAD, PUT"},
	}
	for _, tt := range tests {
		r := e.do(tt.method, tt.path, "")
		if r.status != 405 || r.json(t)["error"] != "method_not_allowed" {
			t.Errorf("%s %s = %d %s, want 405 method_not_allowed", tt.method, tt.path, r.status, r)
		}
		if got := r.header.Get("Allow"); got != tt.allow {
			t.Errorf("%s %s Allow = %q, want %q", tt.method, tt.path, got, tt.allow)
		}
	}
	r := e.must(e.do("GET", "/nothing/here", ""), 404)
	if r.json(t)["error"] != "not_found" {
		t.Errorf("unknown route = %s, want not_found", r)
	}
}

func TestUnavailableWhileFileBroken(t *testing.T) {
	e := newEnv(t, Config{})
	if err := os.WriteFile(e.path, []byte("rules: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(time.Hour)
	os.Chtimes(e.path, now, now)
	r := e.must(e.do("PUT", "/rules/a", ruleA), 503)
	if m := r.json(t); m["error"] != "unavailable" || !strings.Contains(m["message"].(string), "rules.yaml") {
		t.Errorf("PUT over a broken file = %s, want unavailable naming the file", r)
	}
	e.must(e.do("GET", "/rules", ""), 200) // reads still work
}

// seed puts rules a and b and client user:alice in place (revision 3).
func seed(e *env) {
	e.t.Helper()
	e.must(e.do("PUT", "/rules/a", `{"limit": 10, "window": "1m"}`), 201)
	e.must(e.do("PUT", "/rules/b", `{"limit": 20, "window": "1m"}`), 201)
	e.must(e.do("PUT", "/clients/user:alice", `{"plan": "pro"}`), 201)
}

type applyResult struct {
	Revision int64    `json:"revision"`
	DryRun   bool     `json:"dry_run"`
	Changes  []Change `json:"changes"`
}

func (e *env) apply(query, doc string, status int) applyResult {
	e.t.Helper()
	r := e.must(e.do("POST", "/apply"+query, doc), status)
	var res applyResult
	if err := json.Unmarshal(r.body, &res); err != nil {
		e.t.Fatal(err)
	}
	return res
}

func changeKeys(cs []Change) []string {
	keys := []string{}
	for _, c := range cs {
		keys = append(keys, c.Op+" "+c.Kind+" "+c.ID)
	}
	return keys
}

func TestApply(t *testing.T) {
	e := newEnv(t, Config{})
	seed(e)
	const doc = `{
		"rules": [
			{"id": "c", "limit": 5, "window": "1s"},
			{"id": "a", "limit": 11, "window": "1m"}
		],
		"clients": {"user:alice": {"plan": "partner"}, "api_key:k1": {"plan": "pro"}},
		"default_plan": "basic"
	}`
	wantChanges := []string{
		"create rule c", "update rule a", "delete rule b",
		"create client api_key:k1", "update client user:alice",
		"update default_plan ",
	}
	fileBefore, _ := os.ReadFile(e.path)

	dry := e.apply("?dry_run=true", doc, 200)
	if !dry.DryRun || dry.Revision != 3 {
		t.Errorf("dry run = revision %d dry_run %v, want 3 true", dry.Revision, dry.DryRun)
	}
	if got := changeKeys(dry.Changes); !reflect.DeepEqual(got, wantChanges) {
		t.Errorf("dry run changes = %q, want %q", got, wantChanges)
	}
	if e.revision() != 3 {
		t.Errorf("revision after dry run = %d, want 3", e.revision())
	}
	if after, _ := os.ReadFile(e.path); !bytes.Equal(after, fileBefore) {
		t.Errorf("dry run changed the rules file")
	}
	upd := dry.Changes[1]
	if upd.Before.(map[string]any)["limit"] != 10.0 || upd.After.(map[string]any)["limit"] != 11.0 {
		t.Errorf("update change = %+v, want before limit 10, after 11", upd)
	}

	res := e.apply("", doc, 200)
	if res.DryRun || res.Revision != 4 {
		t.Errorf("apply = revision %d dry_run %v, want 4 false (one revision for all)", res.Revision, res.DryRun)
	}
	if got := changeKeys(res.Changes); !reflect.DeepEqual(got, wantChanges) {
		t.Errorf("apply changes = %q, want %q", got, wantChanges)
	}
	set := e.src.Current().Set()
	if ids := []string{set.Rules[0].ID, set.Rules[1].ID}; len(set.Rules) != 2 || !reflect.DeepEqual(ids, []string{"c", "a"}) {
		t.Errorf("rules after apply = %+v, want [c a]", set.Rules)
	}
	if set.DefaultPlan != "basic" || set.Clients["user:alice"].Plan != "partner" || set.Clients["api_key:k1"].Plan != "pro" {
		t.Errorf("set after apply = %+v", set)
	}

	// Applying the same document again changes nothing and stores nothing.
	again := e.apply("", doc, 200)
	if len(again.Changes) != 0 || again.Revision != 4 {
		t.Errorf("re-apply = %d changes at revision %d, want 0 at 4", len(again.Changes), again.Revision)
	}

	// Only what the document holds is replaced.
	only := e.apply("", `{"rules": []}`, 200)
	if got := changeKeys(only.Changes); !reflect.DeepEqual(got, []string{"delete rule c", "delete rule a"}) {
		t.Errorf(`apply {"rules": []} changes = %q`, got)
	}
	if set := e.src.Current().Set(); len(set.Clients) != 2 || set.DefaultPlan != "basic" {
		t.Errorf("clients or default plan changed by a rules-only document: %+v", set)
	}
	clientsOnly := e.apply("", `{"clients": {}}`, 200)
	if len(clientsOnly.Changes) != 2 {
		t.Errorf(`apply {"clients": {}} = %q, want two deletes`, changeKeys(clientsOnly.Changes))
	}
}

func TestApplyInvalidChangesNothing(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{"one invalid rule", `{"rules": [{"id": "x", "limit": 5, "window": "1m"}, {"id": "y", "limit": -1, "window": "1m"}]}`, []string{"rules[1]", "limit"}},
		{"duplicate id", `{"rules": [{"id": "x", "limit": 5, "window": "1m"}, {"id": "x", "limit": 6, "window": "1m"}]}`, []string{"rules[1]", "duplicate"}},
		{"bad client", `{"rules": [], "clients": {"bob": {"plan": "pro"}}}`, []string{"clients", "bob"}},
		{"bad default plan", `{"default_plan": "a b"}`, []string{"default_plan"}},
		{"unknown field", `{"rules": [], "rulez": []}`, []string{"rulez"}},
		{"malformed", `{"rules": [`, []string{"body"}},
		{"unknown algorithm", `{"rules": [{"id": "x", "limit": 5, "window": "1m", "algorithm": "x"}]}`, []string{"rules[0]", "algorithm"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, Config{})
			seed(e)
			before := e.src.Current()
			for _, q := range []string{"?dry_run=true", ""} {
				r := e.must(e.do("POST", "/apply"+q, tt.doc), 400)
				msg := r.json(t)["message"].(string)
				for _, w := range tt.want {
					if !strings.Contains(msg, w) {
						t.Errorf("apply%s message = %q, want it to contain %q", q, msg, w)
					}
				}
			}
			if e.src.Current() != before {
				t.Errorf("an invalid document changed the rules (revision %d)", e.revision())
			}
		})
	}
}

func TestApplyDryRunParam(t *testing.T) {
	e := newEnv(t, Config{})
	for _, q := range []string{"?dry_run", "?dry_run=1", "?dry_run=true"} {
		if res := e.apply(q, `{"default_plan": "pro"}`, 200); !res.DryRun {
			t.Errorf("apply%s dry_run = false, want true", q)
		}
	}
	e.must(e.do("POST", "/apply?dry_run=maybe", `{}`), 400)
	if res := e.apply("?dry_run=false", `{"default_plan": "pro"}`, 200); res.DryRun || res.Revision != 1 {
		t.Errorf("apply?dry_run=false = %+v, want applied at revision 1", res)
	}
}

func TestDiffSets(t *testing.T) {
	no := false
	yes := true
	base := rules.Rule{ID: "a", Limit: 1, Window: rules.Duration(time.Second)}
	with := func(f func(*rules.Rule)) rules.Rule { r := base; f(&r); return r }
	tests := []struct {
		name      string
		old, next *rules.Set
		want      []string
	}{
		{"both nil", nil, nil, []string{}},
		{"create from nil", nil, &rules.Set{Rules: []rules.Rule{base}}, []string{"create rule a"}},
		{"same", &rules.Set{Rules: []rules.Rule{base}}, &rules.Set{Revision: 9, Rules: []rules.Rule{base}}, []string{}},
		{"defaults spelled out", &rules.Set{Rules: []rules.Rule{base}},
			&rules.Set{Rules: []rules.Rule{with(func(r *rules.Rule) { r.By, r.FailureMode, r.Enabled = rules.ByClient, rules.FailOpen, &yes })}}, []string{}},
		{"disabled", &rules.Set{Rules: []rules.Rule{base}},
			&rules.Set{Rules: []rules.Rule{with(func(r *rules.Rule) { r.Enabled = &no })}}, []string{"update rule a"}},
		{"reordered", &rules.Set{Rules: []rules.Rule{base, with(func(r *rules.Rule) { r.ID = "b" })}},
			&rules.Set{Rules: []rules.Rule{with(func(r *rules.Rule) { r.ID = "b" }), base}}, []string{}},
		{"clients", &rules.Set{Clients: map[string]rules.Client{"user:a": {Plan: "x"}, "user:b": {Plan: "x"}}},
			&rules.Set{Clients: map[string]rules.Client{"user:b": {Plan: "y"}, "user:c": {Plan: "x"}}},
			[]string{"delete client user:a", "update client user:b", "create client user:c"}},
		{"default plan", &rules.Set{DefaultPlan: "free"}, &rules.Set{}, []string{"update default_plan "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := changeKeys(DiffSets(tt.old, tt.next)); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("DiffSets = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCheckBind(t *testing.T) {
	tests := []struct {
		addr, token string
		ok          bool
	}{
		{"127.0.0.1:9090", "", true},
		{"127.8.9.10:9090", "", true},
		{"[::1]:9090", "", true},
		{"localhost:9090", "", true},
		{"LOCALHOST:9090", "", true},
		{"[::ffff:127.0.0.1]:9090", "", true},
		{"127.0.0.1", "", true},
		{":9090", "", false},
		{"0.0.0.0:9090", "", false},
		{"[::]:9090", "", false},
		{"10.0.0.5:9090", "", false},
		{"admin.example.com:9090", "", false},
		{"[fe80::1%lo]:9090", "", false},
		{"", "", false},
		{":9090", "tok", true},
		{"0.0.0.0:9090", "tok", true},
	}
	for _, tt := range tests {
		err := CheckBind(tt.addr, tt.token)
		if (err == nil) != tt.ok {
			t.Errorf("CheckBind(%q, %q) = %v, want ok %v", tt.addr, tt.token, err, tt.ok)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "admin: ") {
			t.Errorf("CheckBind error %q lacks the package prefix", err)
		}
	}
}

func TestContextCanceled(t *testing.T) {
	e := newEnv(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequest("PUT", "http://127.0.0.1:9090/rules/a", strings.NewReader(ruleA)).WithContext(ctx)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	if e.revision() != 0 {
		t.Errorf("a canceled request changed the rules")
	}
}

// BenchmarkGetRules is GET /rules over 100 rules (of an endpoint each: a
// call may match at most limiter.MaxRulesPerCall).
func BenchmarkGetRules(b *testing.B) {
	e := newEnv(b, Config{})
	doc := `{"rules": [`
	for i := range 100 {
		if i > 0 {
			doc += ","
		}
		doc += `{"id": "r` + strconv.Itoa(i) + `", "limit": 10, "window": "1m", "match": {"plan": "free", "endpoint": "GET /api/r` + strconv.Itoa(i) + `/*"}}`
	}
	doc += `]}`
	e.must(e.do("POST", "/apply", doc), 200)
	b.ReportAllocs()
	for b.Loop() {
		if r := e.do("GET", "/rules", ""); r.status != 200 {
			b.Fatal(r.status)
		}
	}
}
