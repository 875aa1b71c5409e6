package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/identity"
	"github.com/sluicehq/sluice/internal/testkit/clocktest"
	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/memory"
)

// start is the test clock's start, 0.3 s past a whole second so that
// rounding shows.
const start = 1716800000_300000 // Unix µs

func newClock() *clocktest.Clock             { return clocktest.New(time.UnixMicro(start)) }
func seconds(d time.Duration) rules.Duration { return rules.Duration(d) }

// newTestServer returns a server over a real limiter and memory store on a
// fake clock, with set in force (none when set is nil).
func newTestServer(t testing.TB, set *rules.Set, cfg Config) (*Server, *clocktest.Clock) {
	t.Helper()
	clk := newClock()
	l := limiter.New(limitertest.Store(t, memory.Config{Shards: 16, Clock: clk.Micros, SweepInterval: -1}), limiter.Config{})
	if set != nil {
		l.SetRules(limitertest.Compile(t, set))
	}
	return New(l, cfg), clk
}

// seedSet is the seed scenario: one token bucket per client, 1 call a
// second with a burst of 10.
func seedSet() *rules.Set {
	return &rules.Set{Rules: []rules.Rule{{
		ID: "seed", By: rules.ByClient, Limit: 1, Window: seconds(time.Second), Burst: 10, Algorithm: algorithm.TokenBucket,
	}}}
}

// answer is the decoded body of a check answer, read as the client reads
// it; Rule and Client are nil for JSON null.
type answer = client.CheckResponse

// post sends body to POST /ratelimit/check.
func post(t testing.TB, h http.Handler, body string) *httptest.ResponseRecorder {
	t.Helper()
	return postTo(t, h, "/ratelimit/check", body)
}

// postTo sends body to POST path.
func postTo(t testing.TB, h http.Handler, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("POST", path, strings.NewReader(body)))
	return w
}

// check posts body and decodes the 200 answer strictly, checking that the
// quota headers (docs/api.md) agree with it.
func check(t *testing.T, s *Server, clk *clocktest.Clock, body string) (answer, http.Header) {
	t.Helper()
	w := post(t, s, body)
	if w.Code != http.StatusOK {
		t.Fatalf("POST %s: status %d %s, want 200", body, w.Code, w.Body)
	}
	dec := json.NewDecoder(w.Body)
	dec.DisallowUnknownFields()
	var a answer
	if err := dec.Decode(&a); err != nil {
		t.Fatalf("POST %s: answer %s does not decode: %v", body, w.Body, err)
	}
	h := w.Result().Header
	if got := h.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", got)
	}
	checkHeaders(t, h, &a, clk)
	return a, h
}

// checkHeaders checks that the quota headers (docs/api.md) agree with the
// answer a.
func checkHeaders(t *testing.T, h http.Header, a *answer, clk *clocktest.Clock) {
	t.Helper()
	if a.Rule == nil {
		for _, k := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit", "Retry-After"} {
			if v, ok := h[http.CanonicalHeaderKey(k)]; ok {
				t.Errorf("no rule matched, but %s = %q", k, v)
			}
		}
		return
	}
	want := map[string]string{
		"X-RateLimit-Limit":     strconv.FormatInt(a.Limit, 10),
		"X-RateLimit-Remaining": strconv.FormatInt(a.Remaining, 10),
		"RateLimit":             `"` + *a.Rule + `";r=` + strconv.FormatInt(a.Remaining, 10) + ";t=" + strconv.FormatInt((a.ResetAfterMS+999)/1000, 10),
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s = %q, want %q (answer %+v)", k, got, v, *a)
		}
	}
	if got, prefix := h.Get("RateLimit-Policy"), `"`+*a.Rule+`";q=`; !strings.HasPrefix(got, prefix) || !strings.Contains(got, ";w=") {
		t.Errorf("RateLimit-Policy = %q, want %s<limit>;w=<secs>", got, prefix)
	}
	reset, err := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
	now := clk.Micros()
	// reset is ⌈now + reset_after⌉ in seconds; reset_after_ms is itself
	// rounded up, so allow for that millisecond.
	if lo, hi := now+(a.ResetAfterMS-1)*1000, now+a.ResetAfterMS*1000+1_000_000; err != nil || reset*1_000_000 < lo || reset*1_000_000 >= hi {
		t.Errorf("X-RateLimit-Reset = %q, want ⌈(%d µs + %d ms) / 1 s⌉", h.Get("X-RateLimit-Reset"), now, a.ResetAfterMS)
	}
	retry, hasRetry := h["Retry-After"]
	switch {
	case a.Allowed || a.Reason == "cost_exceeds_capacity":
		if hasRetry {
			t.Errorf("Retry-After = %q, want none (answer %+v)", retry, *a)
		}
	default:
		wantRetry := strconv.FormatInt(max((a.RetryAfterMS+999)/1000, 1), 10)
		if !hasRetry || retry[0] != wantRetry {
			t.Errorf("Retry-After = %q, want %s (retry_after_ms %d)", retry, wantRetry, a.RetryAfterMS)
		}
	}
}

func TestCheckSeedScenario(t *testing.T) { forDecoders(t, testCheckSeedScenario) }

func testCheckSeedScenario(t *testing.T, dec string) {
	s, clk := newTestServer(t, seedSet(), Config{JSONDecoder: dec})
	const body = `{"user":"alice","ip":"203.0.113.7","endpoint":"GET /api/orders"}`
	for i := 1; i <= 10; i++ {
		a, _ := check(t, s, clk, body)
		if !a.Allowed || a.Remaining != int64(10-i) || a.RetryAfterMS != 0 || a.Reason != "" {
			t.Fatalf("call %d: %+v, want allowed with %d remaining", i, a, 10-i)
		}
		if a.Rule == nil || *a.Rule != "seed" || a.Client == nil || *a.Client != "user:alice" || a.Limit != 1 {
			t.Fatalf("call %d: rule %v client %v limit %d, want seed, user:alice, 1", i, a.Rule, a.Client, a.Limit)
		}
	}
	a, h := check(t, s, clk, body)
	if a.Allowed || a.Reason != "rate_limited" || a.Remaining != 0 {
		t.Fatalf("call 11: %+v, want denied, rate_limited, 0 remaining", a)
	}
	if a.RetryAfterMS <= 0 || a.RetryAfterMS > 1000 {
		t.Errorf("call 11: retry_after_ms = %d, want in (0, 1000]", a.RetryAfterMS)
	}
	if a.ResetAfterMS != 10000 {
		t.Errorf("call 11: reset_after_ms = %d, want 10000 (10 tokens at 1/s)", a.ResetAfterMS)
	}
	for _, k := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit", "Retry-After"} {
		if h.Get(k) == "" {
			t.Errorf("call 11: header %s missing", k)
		}
	}
	if got, want := h.Get("RateLimit-Policy"), `"seed";q=1;w=1`; got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
	// Another client is not affected.
	if a, _ := check(t, s, clk, `{"user":"bob"}`); !a.Allowed {
		t.Errorf("bob: %+v, want allowed", a)
	}
	// A second later alice has one call again, and only one.
	clk.Advance(time.Second)
	if a, _ := check(t, s, clk, body); !a.Allowed {
		t.Errorf("a second later: %+v, want allowed", a)
	}
	if a, _ := check(t, s, clk, body); a.Allowed {
		t.Errorf("a second later, second call: %+v, want denied", a)
	}
}

func TestCheckAnswers(t *testing.T) { forDecoders(t, testCheckAnswers) }

func testCheckAnswers(t *testing.T, dec string) {
	set := &rules.Set{
		DefaultPlan: "free",
		Rules: []rules.Rule{
			{ID: "pro-only", Match: rules.Match{Plan: "pro"}, Limit: 5, Window: seconds(time.Minute)},
			{ID: "free-per-key", Match: rules.Match{Plan: "free", Endpoint: "GET /keyed"}, By: rules.ByAPIKey, Limit: 5, Window: seconds(time.Minute)},
			{ID: "free-per-ip", Match: rules.Match{Plan: "free", Endpoint: "GET /by-ip"}, By: rules.ByIP, Limit: 5, Window: seconds(time.Minute)},
			{ID: "free-user", Match: rules.Match{Plan: "free", Endpoint: "* /users/*"}, Limit: 10, Window: seconds(time.Minute), Burst: 10},
			{ID: "beta-cap", Match: rules.Match{Plan: "free", Endpoint: "* /users/*"}, Limit: 1, Window: seconds(time.Hour), Burst: 1, Shadow: true},
		},
		Clients: map[string]rules.Client{"api_key:k_live_42": {Plan: "free"}}, // an unregistered key is no caller
	}
	s, clk := newTestServer(t, set, Config{JSONDecoder: dec})
	str := func(s string) *string { return &s }
	tests := []struct {
		name string
		body string
		want answer
	}{
		{"no rule matches", `{"user":"alice","endpoint":"GET /nothing"}`,
			answer{Allowed: true}},
		{"by api key", `{"user":"alice","api_key":"k_live_42","endpoint":"GET /keyed"}`,
			answer{Allowed: true, Limit: 5, Remaining: 4, ResetAfterMS: 12000, Rule: str("free-per-key"), Client: str("api_key:k_live_42")}},
		{"rule keyed by a missing identity", `{"user":"alice","endpoint":"GET /keyed"}`,
			answer{Allowed: true}},
		{"by ipv6 /64", `{"user":"alice","ip":"[2001:db8:1:2:3:4:5:6]","endpoint":"GET /by-ip"}`,
			answer{Allowed: true, Limit: 5, Remaining: 4, ResetAfterMS: 12000, Rule: str("free-per-ip"), Client: str("ip:2001:db8:1:2::/64")}},
		{"by ipv4-mapped", `{"ip":"::ffff:10.1.2.3","endpoint":"GET /by-ip"}`,
			answer{Allowed: true, Limit: 5, Remaining: 4, ResetAfterMS: 12000, Rule: str("free-per-ip"), Client: str("ip:10.1.2.3")}},
		{"escaped client", `{"user":"a\"b\\c\u2028","endpoint":"GET /users/1"}`,
			answer{Allowed: true, Limit: 10, Remaining: 9, ResetAfterMS: 6000, Rule: str("free-user"), Client: str("user:a\"b\\c\u2028")}},
		{"shadow rule would deny", `{"user":"a\"b\\c\u2028","endpoint":"GET /users/1"}`,
			answer{Allowed: true, Limit: 10, Remaining: 8, ResetAfterMS: 12000, Rule: str("free-user"), Client: str("user:a\"b\\c\u2028"), ShadowDenied: "beta-cap"}},
		{"cost exceeds capacity", `{"user":"carol","endpoint":"POST /users/2","cost":11}`,
			answer{Allowed: false, Limit: 10, Remaining: 10, Rule: str("free-user"), Client: str("user:carol"), Reason: "cost_exceeds_capacity", ShadowDenied: "beta-cap"}},
		{"plan from the request", `{"user":"alice","plan":"pro"}`,
			answer{Allowed: true, Limit: 5, Remaining: 4, ResetAfterMS: 12000, Rule: str("pro-only"), Client: str("user:alice")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := check(t, s, clk, tt.body)
			if !equalAnswer(got, tt.want) {
				t.Errorf("POST %s = %s, want %s", tt.body, fmtAnswer(got), fmtAnswer(tt.want))
			}
		})
	}
}

func equalAnswer(a, b answer) bool {
	eq := func(x, y *string) bool { return x == nil && y == nil || x != nil && y != nil && *x == *y }
	return eq(a.Rule, b.Rule) && eq(a.Client, b.Client) && a.Allowed == b.Allowed && a.Limit == b.Limit &&
		a.Remaining == b.Remaining && a.ResetAfterMS == b.ResetAfterMS && a.RetryAfterMS == b.RetryAfterMS &&
		a.Reason == b.Reason && a.ShadowDenied == b.ShadowDenied
}

func fmtAnswer(a answer) string {
	b, _ := json.Marshal(a)
	return string(b)
}

func TestAppendAnswer(t *testing.T) {
	r := &rules.Compiled{Rule: rules.Rule{ID: "free-per-user"}}
	req := &CheckRequest{User: "alice", IP: "2001:db8::1"}
	tests := []struct {
		name string
		d    limiter.Decision
		want string
	}{
		{"spec example", limiter.Decision{Reason: algorithm.ReasonLimited, Limit: 100, ResetAfter: 2400 * time.Millisecond, RetryAfter: 600 * time.Millisecond, Rule: r, KeyedBy: rules.ByUser},
			`{"allowed":false,"limit":100,"remaining":0,"reset_after_ms":2400,"retry_after_ms":600,"rule":"free-per-user","client":"user:alice","reason":"rate_limited"}`},
		{"rounds up", limiter.Decision{Reason: algorithm.ReasonLimited, Limit: 100, ResetAfter: 2400*time.Millisecond + time.Microsecond, RetryAfter: time.Microsecond, Rule: r, KeyedBy: rules.ByIP},
			`{"allowed":false,"limit":100,"remaining":0,"reset_after_ms":2401,"retry_after_ms":1,"rule":"free-per-user","client":"ip:2001:db8::/64","reason":"rate_limited"}`},
		{"allowed", limiter.Decision{Allowed: true, Limit: 100, Remaining: 42, ResetAfter: time.Second, RetryAfter: time.Second, Rule: r, KeyedBy: rules.ByUser, ShadowDenied: "beta"},
			`{"allowed":true,"limit":100,"remaining":42,"reset_after_ms":1000,"retry_after_ms":0,"rule":"free-per-user","client":"user:alice","shadow_denied":"beta"}`},
		{"no rule", limiter.Decision{Allowed: true},
			`{"allowed":true,"limit":0,"remaining":0,"reset_after_ms":0,"retry_after_ms":0,"rule":null,"client":null}`},
		{"capacity", limiter.Decision{Reason: algorithm.ReasonCostExceedsCapacity, Limit: 100, Remaining: 100, Rule: r, KeyedBy: rules.ByUser},
			`{"allowed":false,"limit":100,"remaining":100,"reset_after_ms":0,"retry_after_ms":0,"rule":"free-per-user","client":"user:alice","reason":"cost_exceeds_capacity"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var client []byte
			if tt.d.Rule != nil {
				id := identity.Identity{User: req.User, APIKey: req.APIKey, IP: req.IP}
				client = id.AppendClientID(nil, string(tt.d.KeyedBy), 64)
			}
			got := string(appendAnswer(nil, &tt.d, client))
			if got != tt.want+"\n" {
				t.Errorf("appendAnswer = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestCheckErrors(t *testing.T) { forDecoders(t, testCheckErrors) }

func testCheckErrors(t *testing.T, dec string) {
	s, _ := newTestServer(t, seedSet(), Config{JSONDecoder: dec})
	big := `{"user":"` + strings.Repeat("a", 100<<10) + `"}`
	tests := []struct {
		name       string
		req        *http.Request
		wantStatus int
		wantCode   string
		wantMsg    string
	}{
		{"bad cost", httptest.NewRequest("POST", "/ratelimit/check", strings.NewReader(`{"user":"a","cost":0}`)),
			400, "invalid_request", "cost: must be at least 1, got 0"},
		{"unknown field", httptest.NewRequest("POST", "/ratelimit/check", strings.NewReader(`{"user":"a","costs":1}`)),
			400, "invalid_request", `unknown field "costs"; want user, api_key, ip, plan, endpoint, cost`},
		{"endpoint", httptest.NewRequest("POST", "/ratelimit/check", strings.NewReader(`{"user":"a","endpoint":"/x"}`)),
			400, "invalid_request", `endpoint: want "METHOD /path", e.g. "GET /api/orders", got "/x"`},
		{"malformed", httptest.NewRequest("POST", "/ratelimit/check", strings.NewReader(`{"user":`)),
			400, "invalid_request", "malformed JSON: unexpected end of input at offset 8, want a value"},
		{"empty", httptest.NewRequest("POST", "/ratelimit/check", nil),
			400, "invalid_request", `request body is empty; want a JSON object such as {"user":"alice","endpoint":"GET /api/orders"}`},
		{"100 KiB with length", httptest.NewRequest("POST", "/ratelimit/check", strings.NewReader(big)),
			413, "payload_too_large", "the request body is larger than 65536 bytes"},
		{"100 KiB chunked", httptest.NewRequest("POST", "/ratelimit/check", io.MultiReader(strings.NewReader(big))),
			413, "payload_too_large", "the request body is larger than 65536 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			s.ServeHTTP(w, tt.req)
			if w.Code != tt.wantStatus {
				t.Errorf("status = %d, want %d", w.Code, tt.wantStatus)
			}
			if got := w.Header().Get("Content-Type"); got != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", got)
			}
			var body struct{ Error, Message string }
			jd := json.NewDecoder(w.Body)
			jd.DisallowUnknownFields()
			if err := jd.Decode(&body); err != nil {
				t.Fatalf("body %s: %v", w.Body, err)
			}
			if body.Error != tt.wantCode || !sameMessage(dec, body.Message, tt.wantMsg) {
				t.Errorf("body = %+v, want {%s %s}", body, tt.wantCode, tt.wantMsg)
			}
		})
	}
}

func TestCheckUnavailable(t *testing.T) {
	s, _ := newTestServer(t, nil, Config{}) // no rules loaded: Check fails
	w := post(t, s, `{"user":"a"}`)
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("status = %d, want 503", w.Code)
	}
	want := `{"error":"unavailable","message":"the rate limiter could not decide: limiter: no rules loaded"}` + "\n"
	if got := w.Body.String(); got != want {
		t.Errorf("body = %s, want %s", got, want)
	}
	// Errors are logged at most once a second, not at the request rate.
	var logged atomic.Int64
	s, _ = newTestServer(t, nil, Config{Logger: slog.New(countHandler{&logged})})
	for range 5 {
		post(t, s, `{"user":"a"}`)
	}
	if got := logged.Load(); got != 1 {
		t.Errorf("5 failed checks in a burst logged %d records, want 1", got)
	}
	// A cancelled request is answered the same way.
	s, _ = newTestServer(t, seedSet(), Config{Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w = httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest("POST", "/ratelimit/check", strings.NewReader(`{"user":"a"}`)).WithContext(ctx))
	if w.Code != http.StatusServiceUnavailable {
		t.Errorf("cancelled: status = %d, want 503", w.Code)
	}
}

func TestRoutes(t *testing.T) {
	ready := true
	s, _ := newTestServer(t, seedSet(), Config{Ready: func() (bool, map[string]any) {
		return ready, map[string]any{"rules_revision": 7, "store": "memory", "status": "ignored"}
	}})
	s.Handle("GET /metrics", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "m 1\n") }))
	tests := []struct {
		name, method, path string
		setReady           bool
		wantStatus         int
		wantBody           string
		wantAllow          string
	}{
		{"healthz", "GET", "/healthz", true, 200, `{"status":"ok"}` + "\n", ""},
		{"readyz ready", "GET", "/readyz", true, 200, `{"status":"ready","rules_revision":7,"store":"memory"}` + "\n", ""},
		{"readyz not ready", "GET", "/readyz", false, 503, `{"status":"not_ready","rules_revision":7,"store":"memory"}` + "\n", ""},
		{"metrics via Handle", "GET", "/metrics", true, 200, "m 1\n", ""},
		{"check with GET", "GET", "/ratelimit/check", true, 405, "", "POST"},
		{"healthz with POST", "POST", "/healthz", true, 405, "", "GET, HEAD"},
		{"unknown path", "GET", "/nope", true, 404, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ready = tt.setReady
			w := httptest.NewRecorder()
			s.ServeHTTP(w, httptest.NewRequest(tt.method, tt.path, nil))
			if w.Code != tt.wantStatus {
				t.Errorf("%s %s: status = %d, want %d", tt.method, tt.path, w.Code, tt.wantStatus)
			}
			if tt.wantBody != "" && w.Body.String() != tt.wantBody {
				t.Errorf("%s %s: body = %s, want %s", tt.method, tt.path, w.Body, tt.wantBody)
			}
			if got := w.Header().Get("Allow"); got != tt.wantAllow {
				t.Errorf("%s %s: Allow = %q, want %q", tt.method, tt.path, got, tt.wantAllow)
			}
		})
	}
}

func TestReadyzDefault(t *testing.T) {
	s, _ := newTestServer(t, seedSet(), Config{})
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest("GET", "/readyz", nil))
	if w.Code != 200 || w.Body.String() != `{"status":"ready"}`+"\n" {
		t.Errorf("GET /readyz = %d %s, want 200 {\"status\":\"ready\"}", w.Code, w.Body)
	}
}

func TestInternalError(t *testing.T) {
	s, _ := newTestServer(t, seedSet(), Config{Ready: func() (bool, map[string]any) {
		return true, map[string]any{"bad": func() {}} // not JSON
	}})
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest("GET", "/readyz", nil))
	if w.Code != 500 || w.Body.String() != `{"error":"internal","message":"internal error"}`+"\n" {
		t.Errorf("GET /readyz with a bad detail = %d %s, want 500 internal", w.Code, w.Body)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{{MaxBody: -1}, {JSONDecoder: "jsoniter"}} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v.Validate() = nil, want an error", c)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig().Validate() = %v, want nil", err)
	}
}

func TestCheckConcurrent(t *testing.T) {
	s, _ := newTestServer(t, seedSet(), Config{})
	const n = 8
	var allowed atomic.Int64
	errc := make(chan error, n)
	for range n {
		go func() {
			for range 5 {
				w := httptest.NewRecorder()
				s.ServeHTTP(w, httptest.NewRequest("POST", "/ratelimit/check", bytes.NewReader([]byte(`{"user":"shared"}`))))
				var a answer
				if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil {
					errc <- err
					return
				}
				if a.Allowed {
					allowed.Add(1)
				}
			}
			errc <- nil
		}()
	}
	for range n {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if got := allowed.Load(); got != 10 {
		t.Errorf("allowed %d of %d concurrent calls on a burst of 10 with a frozen clock, want 10", got, 5*n)
	}
}

// countHandler counts the records of level Warn and above.
type countHandler struct{ n *atomic.Int64 }

func (h countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.n.Add(1)
	}
	return nil
}
func (h countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countHandler) WithGroup(string) slog.Handler      { return h }

// TestOnError: every error answer is reported to Config.OnError with its
// status (the error-answers metric), and a decision is not.
func TestOnError(t *testing.T) {
	var got []int
	s, _ := newTestServer(t, seedSet(), Config{OnError: func(status int) { got = append(got, status) }})
	for _, body := range []string{`{"user": "alice"}`, `{"cost": 0, "user": "alice"}`, `not json`} {
		post(t, s, body)
	}
	if len(got) != 2 || got[0] != 400 || got[1] != 400 {
		t.Errorf("OnError saw %v, want [400 400] (two malformed requests; the decision is no error)", got)
	}
}
