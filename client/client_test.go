package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/adminclient"
	"github.com/sluicehq/sluice/internal/rulestore"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/memory"
)

// These tests run the client, and internal/adminclient which sends its
// requests through it, against sluice itself, in process: the data plane
// (internal/server over a limiter and a memory store whose clock does not
// move) and the admin API (internal/admin over a rules file), wired as
// sluice serve wires them — the limiter follows every change of the rules.
// Only TestErrors also uses a canned handler, for answers sluice never
// gives (a body that is not JSON, an empty one).

// sluice is a data plane and an admin API sharing one rules file.
type sluice struct {
	data, admin string // base URLs
	src         *rulestore.File
}

const token = "s3cret"

func newSluice(t *testing.T) *sluice {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	src, err := rulestore.OpenFile(rulestore.FileConfig{
		Path:   filepath.Join(t.TempDir(), "rules.yaml"),
		Logger: quiet,
		Tick:   func(time.Duration) (<-chan time.Time, func()) { return nil, func() {} },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	var clock atomic.Int64
	clock.Store(1_700_006_400_000_000) // a whole hour
	lim := limiter.New(limitertest.Store(t, memory.Config{Clock: clock.Load, SweepInterval: -1}), limiter.Config{})
	lim.SetRules(src.Current())
	src.Subscribe(lim.SetRules)

	data := httptest.NewServer(server.New(lim, server.Config{}))
	t.Cleanup(data.Close)
	adm := httptest.NewServer(admin.New(src, admin.Config{Token: token, Logger: quiet}))
	t.Cleanup(adm.Close)
	return &sluice{data: data.URL, admin: adm.URL, src: src}
}

// setRules puts rs in force through the rules store, as a hand edit would.
func (s *sluice) setRules(t *testing.T, rs ...rules.Rule) {
	t.Helper()
	if _, err := s.src.Update(context.Background(), -1, func(set *rules.Set) error {
		set.Rules = rs
		// The API keys the tests send are registered: an unknown key is
		// no caller.
		set.Clients = map[string]rules.Client{"api_key:k_1": {Plan: "pro"}, "api_key:k_2": {Plan: "pro"}}
		return nil
	}); err != nil {
		t.Fatalf("Update: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

// fixedWindow is a rule of limit calls an hour counted in fixed windows,
// so that with the clock still the counts are exact.
func fixedWindow(id string, limit int64, mod func(*rules.Rule)) rules.Rule {
	r := rules.Rule{ID: id, Limit: limit, Window: rules.Duration(time.Hour), Algorithm: algorithm.FixedWindow}
	if mod != nil {
		mod(&r)
	}
	return r
}

func TestCheck(t *testing.T) {
	s := newSluice(t)
	s.setRules(t,
		fixedWindow("free-per-user", 2, func(r *rules.Rule) { r.By = rules.ByUser }),
		fixedWindow("strict", 1, func(r *rules.Rule) { r.By = rules.ByUser; r.Shadow = true }),
		fixedWindow("orders-by-key", 5, func(r *rules.Rule) { r.Match.Endpoint = "POST /api/orders"; r.By = rules.ByAPIKey }),
	)
	c := client.New(s.data + "/") // a trailing slash is ignored
	ctx := context.Background()
	alice := client.CheckRequest{User: "alice", IP: "203.0.113.7", Endpoint: "GET /api/orders"}

	got, err := c.Check(ctx, alice)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	want := &client.CheckResponse{Allowed: true, Limit: 2, Remaining: 1, ResetAfterMS: 3_600_000,
		Rule: ptr("free-per-user"), Client: ptr("user:alice")}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("1st Check = %s, want %s", show(got), show(want))
	}
	got, err = c.Check(ctx, alice)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	want = &client.CheckResponse{Allowed: true, Limit: 2, Remaining: 0, ResetAfterMS: 3_600_000,
		Rule: ptr("free-per-user"), Client: ptr("user:alice"), ShadowDenied: "strict"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("2nd Check = %s, want %s", show(got), show(want))
	}
	// A denial is an answer, not an error.
	got, err = c.Check(ctx, alice)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	want = &client.CheckResponse{Allowed: false, Limit: 2, Remaining: 0, ResetAfterMS: 3_600_000, RetryAfterMS: 3_600_000,
		Rule: ptr("free-per-user"), Client: ptr("user:alice"), Reason: "rate_limited", ShadowDenied: "strict"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("3rd Check = %s, want %s", show(got), show(want))
	}

	// API key, plan and cost reach the server: 3 of the key's 5.
	got, err = c.Check(ctx, client.CheckRequest{APIKey: "k_1", Plan: "pro", Endpoint: "POST /api/orders", Cost: 3})
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if !got.Allowed || got.Rule == nil || *got.Rule != "orders-by-key" || got.Remaining != 2 || *got.Client != "api_key:k_1" {
		t.Errorf("Check(api key, cost 3) = %s, want allowed by orders-by-key for api_key:k_1 with 2 remaining", show(got))
	}
	// A cost above what a bucket holds can never pass.
	got, err = c.Check(ctx, client.CheckRequest{APIKey: "k_2", Endpoint: "POST /api/orders", Cost: 6})
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if got.Allowed || got.Reason != "cost_exceeds_capacity" || got.RetryAfterMS != 0 {
		t.Errorf("Check(cost 6 of 5) = %s, want denied, cost_exceeds_capacity, no retry", show(got))
	}

	// No rule matched: rule and client are null.
	s.setRules(t)
	got, err = c.Check(ctx, alice)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if want := (&client.CheckResponse{Allowed: true}); !reflect.DeepEqual(got, want) {
		t.Errorf("Check with no rules = %s, want %s", show(got), show(want))
	}
}

// TestCheckResponseHasEveryField: client.CheckResponse holds every field the data
// plane writes, so a field added to the answer is not lost by the client.
func TestCheckResponseHasEveryField(t *testing.T) {
	s := newSluice(t)
	s.setRules(t, fixedWindow("one", 1, nil), fixedWindow("shadow", 1, func(r *rules.Rule) { r.Shadow = true }))
	for i, body := range []string{`{"user":"u"}`, `{"user":"u"}`, `{"user":"u","cost":5}`} {
		resp, err := http.Post(s.data+"/ratelimit/check", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		var out client.CheckResponse
		if err := dec.Decode(&out); err != nil {
			t.Errorf("answer %d %s does not decode into client.CheckResponse with unknown fields refused: %v", i, b, err)
		}
	}
}

func show(r *client.CheckResponse) string {
	b, _ := json.Marshal(r)
	return string(b)
}

func TestErrors(t *testing.T) {
	s := newSluice(t)
	ctx := context.Background()
	data, adm := client.New(s.data), adminclient.New(s.admin, client.WithToken(token))

	// Answers sluice gives.
	var e *client.Error
	_, err := data.Check(ctx, client.CheckRequest{User: "a", Endpoint: "x"})
	if !errors.As(err, &e) || e.Status != 400 || e.Code != "invalid_request" || !strings.Contains(e.Message, "endpoint") {
		t.Errorf("Check(endpoint x) = %v, want a 400 invalid_request *client.Error naming the endpoint", err)
	}
	_, err = adm.GetRule(ctx, "x")
	if !errors.As(err, &e) || e.Status != 404 || e.Code != "not_found" || !strings.Contains(e.Message, `"x"`) || !adminclient.IsNotFound(err) {
		t.Errorf("GetRule(x) = %v, want a 404 not_found *client.Error naming x", err)
	}
	_, err = adminclient.New(s.admin).ListRules(ctx)
	if !errors.As(err, &e) || e.Status != 401 || e.Code != "unauthorized" {
		t.Errorf("ListRules without the token = %v, want a 401 unauthorized *Error", err)
	}
	_, err = adm.PutRule(ctx, rules.Rule{ID: "bad", Limit: -1, Window: rules.Duration(time.Second)})
	if !errors.As(err, &e) || e.Status != 400 || e.Code != "invalid_request" || !strings.Contains(e.Message, "limit") {
		t.Errorf("PutRule(limit -1) = %v, want a 400 invalid_request *client.Error naming the limit", err)
	}

	// Answers sluice never gives, from a canned handler: a body that is
	// not JSON, and none at all.
	mux := http.NewServeMux()
	mux.HandleFunc("GET /rules", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
		io.WriteString(w, "<html>bad gateway</html>\n")
	})
	mux.HandleFunc("DELETE /rules/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	canned := httptest.NewServer(mux)
	t.Cleanup(canned.Close)
	c := adminclient.New(canned.URL)
	tests := []struct {
		name string
		call func() error
		want client.Error
	}{
		{"not JSON", func() error { _, err := c.ListRules(ctx); return err },
			client.Error{502, "", "<html>bad gateway</html>"}},
		{"empty body", func() error { return c.DeleteRule(ctx, "x") },
			client.Error{503, "", "Service Unavailable"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			var e *client.Error
			if !errors.As(err, &e) {
				t.Fatalf("error = %v (%T), want *Error", err, err)
			}
			if *e != tt.want {
				t.Errorf("error = %+v, want %+v", *e, tt.want)
			}
		})
	}
	nf := &client.Error{Status: 404, Code: "not_found", Message: `rule "x" does not exist`}
	if got, want := nf.Error(), `sluice: 404 not_found: rule "x" does not exist`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !adminclient.IsNotFound(nf) || adminclient.IsNotFound(&client.Error{Status: 400}) || adminclient.IsNotFound(errors.New("x")) {
		t.Error("IsNotFound: want true for a 404 *client.Error only")
	}

	// A server that is not there: a transport error, not an *Error.
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	_, err = adminclient.New(dead.URL).ListRules(ctx)
	if err == nil || errors.As(err, &e) || !strings.HasPrefix(err.Error(), "client: ") {
		t.Errorf("ListRules on a closed port = %v, want a client: transport error", err)
	}
}

// TestAdmin: every admin call against the admin API, and a rule written
// through it limits the data plane's next decision.
func TestAdmin(t *testing.T) {
	s := newSluice(t)
	c := adminclient.New(s.admin, client.WithToken(token), client.WithHTTPClient(&http.Client{Timeout: 5 * time.Second}))
	data := client.New(s.data)
	ctx := context.Background()

	set, err := c.ListRules(ctx)
	if err != nil {
		t.Fatalf("ListRules: %v", err)
	}
	rev := set.Revision
	if len(set.Rules) != 0 || set.Revision != s.src.Current().Revision() {
		t.Fatalf("ListRules of a new rules file = %+v, want no rules at revision %d", set, s.src.Current().Revision())
	}

	burst := rules.Rule{ID: "burst", Limit: 1, Window: rules.Duration(time.Hour), Burst: 2}
	got, err := c.PutRule(ctx, burst)
	if err != nil || got != rev+1 {
		t.Fatalf("PutRule = %d, %v; want %d, nil", got, err, rev+1)
	}
	rev++
	r, err := c.GetRule(ctx, "burst")
	if err != nil {
		t.Fatalf("GetRule: %v", err)
	}
	if want := (rules.Rule{ID: "burst", Limit: 1, Window: rules.Duration(time.Hour), Burst: 2, Algorithm: algorithm.TokenBucket}); !reflect.DeepEqual(*r, want) {
		t.Errorf("GetRule = %+v, want %+v", *r, want)
	}
	// The rule is in force on the data plane: a burst of 2, then denied.
	for i, want := range []bool{true, true, false} {
		d, err := data.Check(ctx, client.CheckRequest{User: "alice"})
		if err != nil || d.Allowed != want || d.Rule == nil || *d.Rule != "burst" {
			t.Fatalf("Check %d after PutRule = %+v, %v; want allowed %v by burst", i+1, d, err, want)
		}
	}
	// Raised through the API: the next call passes at once.
	burst.Burst = 3
	if got, err := c.PutRule(ctx, burst); err != nil || got != rev+1 {
		t.Fatalf("PutRule(burst 3) = %d, %v; want %d, nil", got, err, rev+1)
	}
	rev++
	if d, err := data.Check(ctx, client.CheckRequest{User: "alice"}); err != nil || !d.Allowed {
		t.Fatalf("Check after raising the burst to 3 = %+v, %v; want allowed", d, err)
	}
	if _, err := c.PutRule(ctx, rules.Rule{}); err == nil {
		t.Error("PutRule(no id) = nil error, want one")
	}

	set, err = c.ListRules(ctx)
	if err != nil || set.Revision != rev || len(set.Rules) != 1 || set.Rules[0].ID != "burst" || set.Rules[0].Burst != 3 {
		t.Errorf("ListRules = %+v, %v; want burst (burst 3) at revision %d", set, err, rev)
	}

	// The client registry, with an id that holds a slash.
	const v6 = "ip:2001:db8::/64"
	if got, err := c.PutClient(ctx, v6, rules.Client{Plan: "pro"}); err != nil || got != rev+1 {
		t.Fatalf("PutClient = %d, %v; want %d, nil", got, err, rev+1)
	}
	rev++
	if cl, err := c.GetClient(ctx, v6); err != nil || cl.Plan != "pro" {
		t.Errorf("GetClient(%s) = %+v, %v; want plan pro", v6, cl, err)
	}
	cs, err := c.ListClients(ctx)
	if want := map[string]rules.Client{v6: {Plan: "pro"}}; err != nil || cs.Revision != rev || !reflect.DeepEqual(cs.Clients, want) {
		t.Errorf("ListClients = %+v, %v; want %v at revision %d", cs, err, want, rev)
	}
	if err := c.DeleteClient(ctx, v6); err != nil {
		t.Errorf("DeleteClient: %v", err)
	}
	if _, err := c.GetClient(ctx, v6); !adminclient.IsNotFound(err) {
		t.Errorf("GetClient after DeleteClient = %v, want a 404", err)
	}
	if err := c.DeleteClient(ctx, v6); !adminclient.IsNotFound(err) {
		t.Errorf("DeleteClient of an unknown id = %v, want a 404", err)
	}

	// Deleted through the API: the data plane stops limiting.
	if err := c.DeleteRule(ctx, "burst"); err != nil {
		t.Fatalf("DeleteRule: %v", err)
	}
	if _, err := c.GetRule(ctx, "burst"); !adminclient.IsNotFound(err) {
		t.Errorf("GetRule after DeleteRule = %v, want a 404", err)
	}
	if d, err := data.Check(ctx, client.CheckRequest{User: "alice"}); err != nil || !d.Allowed || d.Rule != nil {
		t.Errorf("Check after DeleteRule = %+v, %v; want allowed by no rule", d, err)
	}
}

func TestApply(t *testing.T) {
	s := newSluice(t)
	c := adminclient.New(s.admin, client.WithToken(token))
	data := client.New(s.data)
	ctx := context.Background()
	rev := s.src.Current().Revision()

	one := fixedWindow("one", 1, nil)
	want := &rules.Set{Rules: []rules.Rule{one}, Clients: map[string]rules.Client{"user:a": {Plan: "pro"}}, DefaultPlan: "basic"}

	// A dry run changes nothing and lists what would change.
	res, err := c.Apply(ctx, want, true)
	if err != nil {
		t.Fatalf("Apply(dry run): %v", err)
	}
	if !res.DryRun || res.Revision != rev || len(res.Changes) != 3 {
		t.Fatalf("Apply(dry run) = %+v, want a dry run at revision %d with 3 changes", res, rev)
	}
	ch := res.Changes[0]
	var after rules.Rule
	if ch.Op != "create" || ch.Kind != "rule" || ch.ID != "one" || ch.Before != nil || json.Unmarshal(ch.After, &after) != nil || after.Limit != 1 {
		t.Errorf("change 0 = %+v (after %s), want the creation of rule one", ch, ch.After)
	}
	ch = res.Changes[2]
	if ch.Op != "update" || ch.Kind != "default_plan" || ch.ID != "" || string(ch.After) != `"basic"` {
		t.Errorf("change 2 = %+v, want the default plan set to basic", ch)
	}
	if s.src.Current().Revision() != rev {
		t.Fatalf("after a dry run the revision is %d, want %d", s.src.Current().Revision(), rev)
	}
	for range 2 {
		if d, err := data.Check(ctx, client.CheckRequest{User: "alice"}); err != nil || !d.Allowed || d.Rule != nil {
			t.Fatalf("Check after a dry run = %+v, %v; want allowed by no rule", d, err)
		}
	}

	res, err = c.Apply(ctx, want, false)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if res.DryRun || res.Revision != rev+1 || len(res.Changes) != 3 {
		t.Fatalf("Apply = %+v, want revision %d with 3 changes", res, rev+1)
	}
	got := s.src.Current().Set()
	if !reflect.DeepEqual(got.Rules, want.Rules) || !reflect.DeepEqual(got.Clients, want.Clients) || got.DefaultPlan != "basic" {
		t.Errorf("rules in force after Apply = %+v, want %+v", got, want)
	}
	if d, err := data.Check(ctx, client.CheckRequest{User: "alice"}); err != nil || !d.Allowed || d.Rule == nil || *d.Rule != "one" {
		t.Fatalf("Check after Apply = %+v, %v; want allowed by one", d, err)
	}
	if d, err := data.Check(ctx, client.CheckRequest{User: "alice"}); err != nil || d.Allowed {
		t.Fatalf("2nd Check after Apply = %+v, %v; want denied", d, err)
	}

	// The same set again changes nothing; nil Clients leaves the registry
	// alone, an empty map empties it.
	res, err = c.Apply(ctx, &rules.Set{Rules: []rules.Rule{one}}, false)
	if err != nil || len(res.Changes) != 0 || res.Revision != rev+1 {
		t.Errorf("Apply(the same rules) = %+v, %v; want no change at revision %d", res, err, rev+1)
	}
	res, err = c.Apply(ctx, &rules.Set{Rules: []rules.Rule{one}, Clients: map[string]rules.Client{}}, false)
	if err != nil || len(res.Changes) != 1 || res.Changes[0].Op != "delete" || res.Changes[0].ID != "user:a" {
		t.Errorf("Apply(empty clients) = %+v, %v; want user:a deleted", res, err)
	}
	// No rules is an empty list: every rule goes.
	if res, err := c.Apply(ctx, &rules.Set{}, false); err != nil || len(res.Changes) != 1 || res.Changes[0].ID != "one" {
		t.Errorf("Apply(no rules) = %+v, %v; want rule one deleted", res, err)
	}
	if d, err := data.Check(ctx, client.CheckRequest{User: "alice"}); err != nil || !d.Allowed || d.Rule != nil {
		t.Errorf("Check after applying no rules = %+v, %v; want allowed by no rule", d, err)
	}
}
