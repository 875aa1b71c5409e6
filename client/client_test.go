package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/rules"
)

// These tests check what the client sends and how it reads answers, against
// small fake handlers that record each request. The real admin API and data
// plane are exercised end to end elsewhere.

type seen struct {
	method, path, query, auth, ctype string
	body                             map[string]any
}

type fake struct {
	mu   sync.Mutex
	reqs []seen
	mux  *http.ServeMux
}

func newFake(t *testing.T) (*fake, *httptest.Server) {
	f := &fake{mux: http.NewServeMux()}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s := seen{method: r.Method, path: r.URL.EscapedPath(), query: r.URL.RawQuery,
			auth: r.Header.Get("Authorization"), ctype: r.Header.Get("Content-Type")}
		if len(b) > 0 {
			if err := json.Unmarshal(b, &s.body); err != nil {
				t.Errorf("%s %s: body %q is not a JSON object: %v", r.Method, r.URL, b, err)
			}
		}
		f.mu.Lock()
		f.reqs = append(f.reqs, s)
		f.mu.Unlock()
		f.mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fake) last(t *testing.T) seen {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) == 0 {
		t.Fatal("no request reached the server")
	}
	return f.reqs[len(f.reqs)-1]
}

func reply(status int, etag, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if etag != "" {
			w.Header().Set("ETag", etag)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

func ptr[T any](v T) *T { return &v }

func TestCheck(t *testing.T) {
	f, srv := newFake(t)
	f.mux.Handle("POST /ratelimit/check", reply(200, "",
		`{"allowed":false,"limit":100,"remaining":0,"reset_after_ms":2400,"retry_after_ms":600,"rule":"free-per-user","client":"user:alice","shadow_denied":"strict"}`))
	c := New(srv.URL + "/")

	got, err := c.Check(context.Background(), CheckRequest{User: "alice", IP: "203.0.113.7", Endpoint: "GET /api/orders"})
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	want := &CheckResponse{Limit: 100, ResetAfterMS: 2400, RetryAfterMS: 600,
		Rule: ptr("free-per-user"), Client: ptr("user:alice"), ShadowDenied: "strict"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Check = %+v, want %+v", got, want)
	}
	req := f.last(t)
	wantBody := map[string]any{"user": "alice", "ip": "203.0.113.7", "endpoint": "GET /api/orders"}
	if !reflect.DeepEqual(req.body, wantBody) || req.ctype != "application/json" || req.auth != "" {
		t.Errorf("sent body %v content-type %q auth %q, want %v, application/json, no auth", req.body, req.ctype, req.auth, wantBody)
	}

	// No rule matched: rule and client are null.
	f.mux.Handle("POST /other/ratelimit/check", reply(200, "", `{"allowed":true,"limit":0,"remaining":0,"reset_after_ms":0,"retry_after_ms":0,"rule":null,"client":null}`))
	got, err = New(srv.URL+"/other").Check(context.Background(), CheckRequest{APIKey: "k", Plan: "pro", Cost: 3})
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if !got.Allowed || got.Rule != nil || got.Client != nil {
		t.Errorf("Check = %+v, want allowed with nil rule and client", got)
	}
	if req := f.last(t); !reflect.DeepEqual(req.body, map[string]any{"api_key": "k", "plan": "pro", "cost": float64(3)}) {
		t.Errorf("sent body %v, want api_key, plan and cost only", req.body)
	}
}

func TestErrors(t *testing.T) {
	f, srv := newFake(t)
	f.mux.Handle("POST /ratelimit/check", reply(400, "", `{"error":"invalid_request","message":"endpoint: want \"METHOD /path\""}`))
	f.mux.Handle("GET /rules/{id}", reply(404, "", `{"error":"not_found","message":"rule \"x\" does not exist"}`))
	f.mux.Handle("GET /rules", reply(502, "", "<html>bad gateway</html>\n"))
	f.mux.Handle("DELETE /rules/{id}", reply(503, "", ""))
	c := New(srv.URL)
	ctx := context.Background()

	tests := []struct {
		name string
		call func() error
		want Error
	}{
		{"400 from the data plane", func() error { _, err := c.Check(ctx, CheckRequest{User: "a", Endpoint: "x"}); return err },
			Error{400, "invalid_request", `endpoint: want "METHOD /path"`}},
		{"404", func() error { _, err := c.GetRule(ctx, "x"); return err },
			Error{404, "not_found", `rule "x" does not exist`}},
		{"not JSON", func() error { _, err := c.ListRules(ctx); return err },
			Error{502, "", "<html>bad gateway</html>"}},
		{"empty body", func() error { return c.DeleteRule(ctx, "x") },
			Error{503, "", "Service Unavailable"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error = %v (%T), want *Error", err, err)
			}
			if *e != tt.want {
				t.Errorf("error = %+v, want %+v", *e, tt.want)
			}
		})
	}
	nf := &Error{Status: 404, Code: "not_found", Message: `rule "x" does not exist`}
	if got, want := nf.Error(), `sluice: 404 not_found: rule "x" does not exist`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !IsNotFound(nf) || IsNotFound(&Error{Status: 400}) || IsNotFound(errors.New("x")) {
		t.Error("IsNotFound: want true for a 404 *Error only")
	}

	// A server that is not there: a transport error, not an *Error.
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	_, err := New(dead.URL).ListRules(ctx)
	var e *Error
	if err == nil || errors.As(err, &e) || !strings.HasPrefix(err.Error(), "client: ") {
		t.Errorf("ListRules on a closed port = %v, want a client: transport error", err)
	}
}

func TestAdmin(t *testing.T) {
	f, srv := newFake(t)
	f.mux.Handle("GET /rules", reply(200, `"7"`,
		`{"revision":7,"default_plan":"free","rules":[{"id":"free-per-user","match":{"plan":"free"},"limit":100,"window":"1m","algorithm":"token_bucket","enabled":false}]}`))
	f.mux.Handle("GET /rules/{id}", reply(200, `"7"`, `{"id":"free-per-user","match":{},"by":"ip","limit":5,"window":"7d","algorithm":"sliding_log"}`))
	f.mux.Handle("PUT /rules/{id}", reply(201, `"8"`, `{"revision":8,"rule":{}}`))
	f.mux.Handle("DELETE /rules/{id}", reply(200, "", `{"revision":9}`)) // no ETag: the body's revision
	f.mux.Handle("GET /clients", reply(200, `"9"`, `{"revision":9,"default_plan":"free","clients":{"ip:2001:db8::/64":{"plan":"pro"}}}`))
	f.mux.Handle("GET /clients/{id...}", reply(200, `"9"`, `{"plan":"pro"}`))
	f.mux.Handle("PUT /clients/{id...}", reply(200, `"10"`, `{"revision":10,"id":"user:alice","plan":"pro"}`))
	f.mux.Handle("DELETE /clients/{id...}", reply(200, `"11"`, `{"revision":11}`))
	c := New(srv.URL, WithToken("s3cret"), WithHTTPClient(&http.Client{Timeout: 5 * time.Second}))
	ctx := context.Background()

	set, err := c.ListRules(ctx)
	if err != nil {
		t.Fatalf("ListRules: %v", err)
	}
	wantSet := &rules.Set{Revision: 7, DefaultPlan: "free", Rules: []rules.Rule{{
		ID: "free-per-user", Match: rules.Match{Plan: "free"}, Limit: 100, Window: rules.Duration(time.Minute), Enabled: ptr(false),
	}}}
	if !reflect.DeepEqual(set, wantSet) {
		t.Errorf("ListRules = %+v, want %+v", set, wantSet)
	}

	r, err := c.GetRule(ctx, "free-per-user")
	if err != nil {
		t.Fatalf("GetRule: %v", err)
	}
	wantRule := &rules.Rule{ID: "free-per-user", By: rules.ByIP, Limit: 5, Window: rules.Duration(7 * 24 * time.Hour), Algorithm: algorithm.SlidingLog}
	if !reflect.DeepEqual(r, wantRule) {
		t.Errorf("GetRule = %+v, want %+v", r, wantRule)
	}

	rev, err := c.PutRule(ctx, rules.Rule{ID: "burst", Limit: 10, Window: rules.Duration(time.Second), Burst: 20})
	if err != nil || rev != 8 {
		t.Errorf("PutRule = %d, %v; want 8, nil", rev, err)
	}
	req := f.last(t)
	wantBody := map[string]any{"id": "burst", "match": map[string]any{}, "limit": float64(10), "window": "1s", "burst": float64(20), "algorithm": "token_bucket"}
	if req.method != "PUT" || req.path != "/rules/burst" || !reflect.DeepEqual(req.body, wantBody) {
		t.Errorf("PutRule sent %s %s %v, want PUT /rules/burst %v", req.method, req.path, req.body, wantBody)
	}
	if _, err := c.PutRule(ctx, rules.Rule{}); err == nil {
		t.Error("PutRule(no id) = nil error, want one")
	}

	if err := c.DeleteRule(ctx, "burst"); err != nil {
		t.Errorf("DeleteRule: %v", err)
	}
	if req := f.last(t); req.method != "DELETE" || req.path != "/rules/burst" || req.body != nil {
		t.Errorf("DeleteRule sent %s %s %v, want DELETE /rules/burst without a body", req.method, req.path, req.body)
	}

	cs, err := c.ListClients(ctx)
	if err != nil {
		t.Fatalf("ListClients: %v", err)
	}
	wantCs := &rules.Set{Revision: 9, DefaultPlan: "free", Clients: map[string]rules.Client{"ip:2001:db8::/64": {Plan: "pro"}}}
	if !reflect.DeepEqual(cs, wantCs) {
		t.Errorf("ListClients = %+v, want %+v", cs, wantCs)
	}

	// A client id with a slash travels as one escaped path segment.
	cl, err := c.GetClient(ctx, "ip:2001:db8::/64")
	if err != nil || cl.Plan != "pro" {
		t.Errorf("GetClient = %+v, %v; want plan pro", cl, err)
	}
	if req := f.last(t); req.path != "/clients/ip:2001:db8::%2F64" {
		t.Errorf("GetClient path = %s, want /clients/ip:2001:db8::%%2F64", req.path)
	}
	rev, err = c.PutClient(ctx, "user:alice", rules.Client{Plan: "pro"})
	if err != nil || rev != 10 {
		t.Errorf("PutClient = %d, %v; want 10, nil", rev, err)
	}
	if req := f.last(t); req.method != "PUT" || req.path != "/clients/user:alice" || !reflect.DeepEqual(req.body, map[string]any{"plan": "pro"}) {
		t.Errorf("PutClient sent %s %s %v, want PUT /clients/user:alice {plan: pro}", req.method, req.path, req.body)
	}
	if err := c.DeleteClient(ctx, "user:alice"); err != nil {
		t.Errorf("DeleteClient: %v", err)
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.reqs {
		if r.auth != "Bearer s3cret" {
			t.Errorf("%s %s: Authorization %q, want Bearer s3cret", r.method, r.path, r.auth)
		}
	}
}

func TestApply(t *testing.T) {
	f, srv := newFake(t)
	f.mux.Handle("POST /apply", reply(200, `"12"`, `{"revision":12,"dry_run":false,"changes":[
		{"op":"create","kind":"rule","id":"a","after":{"id":"a","limit":1,"window":"1s"}},
		{"op":"update","kind":"default_plan","before":"free","after":"basic"}]}`))
	c := New(srv.URL)
	ctx := context.Background()

	rule := rules.Rule{ID: "a", Limit: 1, Window: rules.Duration(time.Second)}
	tests := []struct {
		name      string
		set       *rules.Set
		dryRun    bool
		wantQuery string
		wantKeys  []string // top-level keys of the body
	}{
		{"rules only", &rules.Set{Revision: 3, Rules: []rules.Rule{rule}}, false, "", []string{"rules"}},
		{"no rules is an empty list", &rules.Set{}, true, "dry_run=true", []string{"rules"}},
		{"clients and default plan", &rules.Set{Rules: []rules.Rule{rule}, Clients: map[string]rules.Client{"user:a": {Plan: "pro"}}, DefaultPlan: "basic"},
			false, "", []string{"clients", "default_plan", "rules"}},
		{"empty clients empties the registry", &rules.Set{Clients: map[string]rules.Client{}}, false, "", []string{"clients", "rules"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := c.Apply(ctx, tt.set, tt.dryRun)
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			req := f.last(t)
			var keys []string
			for k := range req.body {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			if req.query != tt.wantQuery || !reflect.DeepEqual(keys, tt.wantKeys) {
				t.Errorf("Apply sent ?%s with keys %v, want ?%s with %v", req.query, keys, tt.wantQuery, tt.wantKeys)
			}
			if _, ok := req.body["rules"].([]any); !ok {
				t.Errorf("Apply sent rules = %#v, want a list", req.body["rules"])
			}
			if res.Revision != 12 || len(res.Changes) != 2 {
				t.Fatalf("Apply = %+v, want revision 12 with 2 changes", res)
			}
			ch := res.Changes[1]
			if ch.Op != "update" || ch.Kind != "default_plan" || ch.ID != "" || string(ch.Before) != `"free"` || string(ch.After) != `"basic"` {
				t.Errorf("change 1 = %+v, want update default_plan \"free\" → \"basic\"", ch)
			}
			if res.Changes[0].Before != nil {
				t.Errorf("change 0 Before = %s, want none for a create", res.Changes[0].Before)
			}
		})
	}
}
