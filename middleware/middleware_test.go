package middleware_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicehq/sluice/headers"
	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/middleware"
	"github.com/sluicehq/sluice/store/memory"
)

// newLimiter returns a limiter on the embedded store, with a clock that
// stands still at a fixed instant, holding the rules of doc.
func newLimiter(t testing.TB, doc string) *limiter.Limiter {
	t.Helper()
	l := limiter.New(limitertest.Store(t, memory.Config{Clock: func() int64 { return 1_777_777_777_000_000 }, SweepInterval: -1}), limiter.Config{})
	l.SetRules(limitertest.CompileYAML(t, doc))
	return l
}

// counter is the handler behind the middleware: it counts the calls that
// reach it.
type counter struct{ n atomic.Int64 }

func (c *counter) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	c.n.Add(1)
	io.WriteString(w, "ok")
}

// readCounter is a request body that records whether it was read.
type readCounter struct {
	io.Reader
	read atomic.Int64
}

func (r *readCounter) Read(p []byte) (int, error) {
	n, err := r.Reader.Read(p)
	r.read.Add(int64(n))
	return n, err
}

type call struct {
	method, path, remote string
	header               map[string]string
}

func (c call) do(h http.Handler) *httptest.ResponseRecorder {
	if c.method == "" {
		c.method = "GET"
	}
	if c.path == "" {
		c.path = "/"
	}
	r := httptest.NewRequest(c.method, c.path, nil)
	r.RemoteAddr = c.remote
	if r.RemoteAddr == "" {
		r.RemoteAddr = "198.51.100.7:5555"
	}
	for k, v := range c.header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestDeniedNeverReachesNext(t *testing.T) {
	l := newLimiter(t, `
rules:
  - {id: per-ip, by: ip, limit: 2, window: 1m}
`)
	next := &counter{}
	h := middleware.Middleware(l)(next)
	for i := range 2 {
		w := call{path: "/api/orders"}.do(h)
		if w.Code != 200 || w.Body.String() != "ok" {
			t.Fatalf("call %d: %d %q, want 200 ok", i+1, w.Code, w.Body)
		}
		want := map[string]string{
			"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": strconv.Itoa(1 - i),
			"RateLimit-Policy": `"per-ip";q=2;w=60`,
		}
		for k, v := range want {
			if got := w.Header().Get(k); got != v {
				t.Errorf("call %d: %s = %q, want %q", i+1, k, got, v)
			}
		}
		if got := w.Header().Get("Retry-After"); got != "" {
			t.Errorf("call %d: Retry-After = %q on an allowed call", i+1, got)
		}
	}

	body := &readCounter{Reader: strings.NewReader(strings.Repeat("x", 1<<20))}
	r := httptest.NewRequest("POST", "/api/upload", body)
	r.RemoteAddr = "198.51.100.7:5555"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("third call: status %d, want 429", w.Code)
	}
	if n := next.n.Load(); n != 2 {
		t.Errorf("next saw %d calls, want 2", n)
	}
	if n := body.read.Load(); n != 0 {
		t.Errorf("the denied call's body was read: %d bytes, want 0", n)
	}
	var got struct {
		Error      string `json:"error"`
		RetryAfter int64  `json:"retry_after"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatalf("429 body %q: %v", w.Body, err)
	}
	// 2 a minute: a token is back 30 s after the bucket ran dry.
	if got.Error != "rate_limit_exceeded" || got.RetryAfter != 30 {
		t.Errorf("429 body = %+v, want rate_limit_exceeded, retry_after 30", got)
	}
	for k, v := range map[string]string{
		"Content-Type": "application/json", "Retry-After": "30", "X-RateLimit-Remaining": "0",
		"X-RateLimit-Limit": "2", "RateLimit": `"per-ip";r=0;t=60`,
	} {
		if g := w.Header().Get(k); g != v {
			t.Errorf("429 %s = %q, want %q", k, g, v)
		}
	}
}

func TestNoRuleMatched(t *testing.T) {
	l := newLimiter(t, `
rules:
  - {id: orders, match: {endpoint: "GET /api/orders"}, limit: 1, window: 1m}
`)
	next := &counter{}
	h := middleware.Middleware(l)(next)
	for range 3 {
		w := call{path: "/api/users"}.do(h)
		if w.Code != 200 || w.Header().Get("X-RateLimit-Limit") != "" {
			t.Fatalf("unmatched call: %d, X-RateLimit-Limit %q, want 200 and no quota headers", w.Code, w.Header().Get("X-RateLimit-Limit"))
		}
	}
}

func TestEndpointIsCleanedPath(t *testing.T) {
	l := newLimiter(t, `
rules:
  - {id: orders, match: {endpoint: "GET /api/orders"}, limit: 1, window: 1m}
`)
	h := middleware.Middleware(l)(&counter{})
	if w := (call{path: "/api/orders?page=1"}).do(h); w.Code != 200 {
		t.Fatalf("first call: %d, want 200", w.Code)
	}
	for _, p := range []string{"/api/orders", "/api//orders", "/api/./orders/", "/api/x/../orders", "/api/orders?page=2"} {
		if w := (call{path: p}).do(h); w.Code != http.StatusTooManyRequests {
			t.Errorf("GET %s after the limit: %d, want 429", p, w.Code)
		}
	}
	if w := (call{method: "POST", path: "/api/orders"}).do(h); w.Code != 200 {
		t.Errorf("POST /api/orders: %d, want 200 (the rule is for GET)", w.Code)
	}
}

func TestSpoofedForwardedForKeepsTheBucket(t *testing.T) {
	l := newLimiter(t, `
rules:
  - {id: per-client, by: client, limit: 3, window: 1m}
`)
	next := &counter{}
	h := middleware.Middleware(l)(next) // no trusted proxies
	for i := range 10 {
		call{header: map[string]string{"X-Forwarded-For": "203.0.113." + strconv.Itoa(i), "Forwarded": "for=203.0.113." + strconv.Itoa(i)}}.do(h)
	}
	if n := next.n.Load(); n != 3 {
		t.Errorf("next saw %d of 10 calls with spoofed headers, want 3", n)
	}

	// Behind a trusted proxy, the right-most untrusted address is the caller.
	trusted := middleware.Middleware(l, middleware.WithIdentifier(&middleware.Identifier{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
	}))(next)
	next.n.Store(0)
	for i := range 4 {
		for _, client := range []string{"192.0.2.1", "192.0.2.2"} {
			call{remote: "10.0.0.2:1234", header: map[string]string{"X-Forwarded-For": "1.1.1." + strconv.Itoa(i) + ", " + client + ", 10.0.0.9"}}.do(trusted)
		}
	}
	if n := next.n.Load(); n != 6 {
		t.Errorf("next saw %d of 8 calls from two clients behind a proxy, want 3 each", n)
	}
}

func TestRandomAPIKeysHitTheIPRule(t *testing.T) {
	l := newLimiter(t, `
clients:
  "api_key:k_live_42": {plan: partner}
rules:
  - {id: per-ip, match: {plan: free}, by: ip, limit: 3, window: 1m}
  - {id: free-per-client, match: {plan: free}, by: client, limit: 100, window: 1m}
  - {id: partner, match: {plan: partner}, by: api_key, limit: 5, window: 1m}
default_plan: free
`)
	next := &counter{}
	h := middleware.Middleware(l)(next)
	for i := range 10 {
		call{header: map[string]string{"X-API-Key": "k_random_" + strconv.Itoa(i)}}.do(h)
	}
	if n := next.n.Load(); n != 3 {
		t.Errorf("random API keys from one IP: next saw %d of 10, want 3 (the per-IP rule)", n)
	}
	next.n.Store(0)
	for range 10 {
		call{remote: "198.51.100.99:1", header: map[string]string{"X-API-Key": "k_live_42"}}.do(h)
	}
	if n := next.n.Load(); n != 5 {
		t.Errorf("registered API key: next saw %d of 10, want 5 (its partner plan)", n)
	}
}

// jwtSecret signs the tokens of the JWT tests (HS256).
var jwtSecret = []byte("test-secret-of-32-bytes-at-least!")

// jwtFilter returns the middleware in front of next, deciding with the
// rules of doc and identifying callers by tokens signed with jwtSecret.
func jwtFilter(t *testing.T, doc string, next http.Handler) http.Handler {
	t.Helper()
	v, err := middleware.NewJWTVerifier(middleware.JWTConfig{HS256Secret: jwtSecret})
	if err != nil {
		t.Fatal(err)
	}
	return middleware.Middleware(newLimiter(t, doc), middleware.WithIdentifier(&middleware.Identifier{JWT: v}))(next)
}

// bearer returns an Authorization value carrying a token with claims,
// signed with jwtSecret.
func bearer(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(jwtSecret)
	if err != nil {
		t.Fatal(err)
	}
	return "Bearer " + s
}

func TestJWTUserAndPlan(t *testing.T) {
	now := time.Now()
	next := &counter{}
	h := jwtFilter(t, `
rules:
  - {id: anon-per-ip, match: {plan: free}, by: ip, limit: 2, window: 1m}
  - {id: pro-per-user, match: {plan: pro}, by: user, limit: 4, window: 1m}
default_plan: free
`, next)
	token := func(sub string, exp time.Time) string {
		return bearer(t, jwt.MapClaims{"sub": sub, "plan": "pro", "exp": exp.Unix()})
	}
	calls := func(auth string, n int) int64 {
		next.n.Store(0)
		for range n {
			call{remote: "198.51.100.50:1", header: map[string]string{"Authorization": auth}}.do(h)
		}
		return next.n.Load()
	}
	if got := calls(token("alice", now.Add(time.Hour)), 10); got != 4 {
		t.Errorf("valid token: %d of 10 passed, want 4 (pro plan, per user)", got)
	}
	if got := calls(token("bob", now.Add(-time.Minute)), 10); got != 2 {
		t.Errorf("expired token: %d of 10 passed, want 2 (anonymous, per IP)", got)
	}
	if got := calls(token("carol", now.Add(time.Hour))+"x", 10); got != 0 {
		t.Errorf("forged token from the same IP: %d of 10 passed, want 0 (the IP's bucket is empty)", got)
	}
}

func TestCostAndEndpointOptions(t *testing.T) {
	l := newLimiter(t, `
rules:
  - {id: search, match: {endpoint: "* /search"}, limit: 10, window: 1m}
`)
	next := &counter{}
	h := middleware.Middleware(l,
		middleware.WithCost(func(r *http.Request) int64 { n, _ := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64); return n }),
		middleware.WithEndpoint(func(r *http.Request) (string, string) { return r.Method, "/search" }),
	)(next)
	w := call{path: "/anything?n=4"}.do(h)
	if got := w.Header().Get("X-RateLimit-Remaining"); got != "6" {
		t.Errorf("cost 4: remaining %q, want 6", got)
	}
	w = call{path: "/anything?n=0"}.do(h) // below 1 counts as 1
	if got := w.Header().Get("X-RateLimit-Remaining"); got != "5" {
		t.Errorf("cost 0: remaining %q, want 5", got)
	}
	w = call{path: "/anything?n=50"}.do(h)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "" || !strings.Contains(w.Body.String(), "cost_exceeds_capacity") {
		t.Errorf("cost 50 of 10: %d, Retry-After %q, %s; want 429 with no Retry-After, cost_exceeds_capacity",
			w.Code, w.Header().Get("Retry-After"), w.Body)
	}
}

func TestLimiterError(t *testing.T) {
	l := limiter.New(limitertest.Store(t, memory.DefaultConfig()), limiter.Config{}) // no rules: Check fails with ErrNoRules
	next := &counter{}

	w := call{}.do(middleware.Middleware(l)(next))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Content-Type") != "application/json" ||
		w.Body.String() != `{"error":"unavailable","message":"the rate limiter could not decide"}`+"\n" {
		t.Errorf("default error handler: %d %s %q", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	var seen error
	h := middleware.Middleware(l, middleware.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
		seen = err
		w.WriteHeader(http.StatusTeapot)
	}))(next)
	if w := (call{}).do(h); w.Code != http.StatusTeapot || !errors.Is(seen, limiter.ErrNoRules) {
		t.Errorf("custom error handler: %d, err %v, want 418 and limiter.ErrNoRules", w.Code, seen)
	}
	if n := next.n.Load(); n != 0 {
		t.Errorf("next saw %d undecided calls, want 0", n)
	}
}

func TestMiddlewareAllocs(t *testing.T) {
	l := newLimiter(t, `
rules:
  - {id: per-ip, by: ip, limit: 1000000000, window: 1m}
`)
	h := middleware.Middleware(l)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := httptest.NewRequest("GET", "/api/orders", nil)
	r.RemoteAddr = "198.51.100.7:5555"
	w := &discardWriter{h: http.Header{}}
	h.ServeHTTP(w, r)
	n := testing.AllocsPerRun(200, func() { clear(w.h); h.ServeHTTP(w, r) })
	if n > 2 {
		t.Errorf("an allowed call allocates %v times, want at most 2 (headers.Set)", n)
	}
	if w.h.Get(headers.Limit) == "" {
		t.Error("no quota headers")
	}
}

type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}

func TestIPv6KeyedByPrefix(t *testing.T) {
	l := newLimiter(t, `
rules:
  - {id: per-ip, by: ip, limit: 2, window: 1m}
`)
	next := &counter{}
	h := middleware.Middleware(l)(next)
	// Two hosts of one /64 share a bucket; the next /64 has its own.
	for _, remote := range []string{"[2001:db8:1:2::1]:1", "[2001:db8:1:2:ffff::9]:1", "[2001:db8:1:2::7]:1", "[2001:db8:1:3::1]:1"} {
		call{remote: remote}.do(h)
	}
	if n := next.n.Load(); n != 3 {
		t.Errorf("next saw %d calls, want 3: two from 2001:db8:1:2::/64, one from 2001:db8:1:3::/64", n)
	}
}
