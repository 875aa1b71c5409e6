package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/gateway"
	"github.com/sluicehq/sluice/internal/http1"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/middleware"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/memory"
)

func newLimiter(t testing.TB, doc string) *limiter.Limiter {
	t.Helper()
	st, err := memory.New(memory.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	l := limiter.New(st, limiter.Config{})
	l.SetRules(compile(t, doc))
	return l
}

// compile compiles the rules document doc.
func compile(t testing.TB, doc string) *rules.Index {
	t.Helper()
	set, err := rules.ParseYAML([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	ix, err := rules.Compile(set)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

// upstream records the last request it received.
type upstream struct {
	*httptest.Server
	mu   sync.Mutex
	last *http.Request
	n    int
}

func newUpstream(t testing.TB, h http.HandlerFunc) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.last, u.n = r, u.n+1
		u.mu.Unlock()
		if h != nil {
			h(w, r)
			return
		}
		io.WriteString(w, "upstream")
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) lastHeader() http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.last == nil {
		return nil
	}
	return u.last.Header
}

// testEngine is the Config.Engine of the gateways the tests build:
// TestStdEngine runs tests again with gateway.EngineStd.
var testEngine string

func newGateway(t testing.TB, l *limiter.Limiter, target string, mod func(*gateway.Config)) *httptest.Server {
	t.Helper()
	gw := buildGateway(t, l, target, mod)
	if testEngine == gateway.EngineStd {
		// As the proxy port is served with --http-engine std: net/http's
		// server alone.
		srv := httptest.NewUnstartedServer(gw)
		srv.Config.ReadHeaderTimeout, srv.Config.IdleTimeout = 5*time.Second, time.Minute
		srv.Start()
		t.Cleanup(srv.Close)
		return srv
	}
	return serveLoop(t, gw)
}

// buildGateway is a Gateway over l to target, its Config changed by mod,
// closed when the test ends.
func buildGateway(t testing.TB, l *limiter.Limiter, target string, mod func(*gateway.Config)) *gateway.Gateway {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	cfg := gateway.Config{Upstream: u, Engine: testEngine}
	if mod != nil {
		mod(&cfg)
	}
	gw, err := gateway.New(l, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	return gw
}

// serveLoop serves h as the gateway's plain-HTTP proxy port does: the
// server loop, handing what it does not take to net/http's server.
func serveLoop(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fallback := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	loop := &http1.Server{Handler: h, Fallback: fallback}
	done := make(chan struct{})
	go func() { loop.Serve(ln); close(done) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		loop.Shutdown(ctx)
		<-done
	})
	return &httptest.Server{URL: "http://" + ln.Addr().String(), Listener: ln, Config: fallback}
}

func get(t testing.TB, url string, h map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

const noRules = "rules: []\n"

func TestForwardingHeaders(t *testing.T) {
	up := newUpstream(t, nil)
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	tests := []struct {
		name    string
		trusted []netip.Prefix
		in      map[string]string
		want    map[string]string // "" means absent
	}{
		{"untrusted peer: chain starts at the peer", nil,
			map[string]string{"X-Forwarded-For": "1.2.3.4", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "evil", "Forwarded": "for=1.2.3.4"},
			map[string]string{"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "http", "X-Forwarded-Host": "HOST", "Forwarded": ""}},
		{"trusted peer: chain appended", loopback,
			map[string]string{"X-Forwarded-For": "1.2.3.4, 10.0.0.1", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "api.example.com", "Forwarded": "for=1.2.3.4;proto=https"},
			map[string]string{"X-Forwarded-For": "1.2.3.4, 10.0.0.1, 127.0.0.1", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "api.example.com",
				"Forwarded": "for=1.2.3.4;proto=https, for=127.0.0.1;proto=http"}},
		{"trusted peer, no prior headers", loopback, nil,
			map[string]string{"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "http", "X-Forwarded-Host": "HOST", "Forwarded": ""}},
		{"hop-by-hop headers removed", nil,
			map[string]string{"Connection": "X-Secret, keep-alive", "X-Secret": "s", "Keep-Alive": "timeout=5", "Proxy-Authorization": "Basic x", "Te": "gzip", "X-Kept": "k"},
			map[string]string{"X-Secret": "", "Keep-Alive": "", "Proxy-Authorization": "", "Te": "", "Connection": "", "X-Kept": "k"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gw := newGateway(t, newLimiter(t, noRules), up.URL, func(c *gateway.Config) {
				c.Identifier = &middleware.Identifier{TrustedProxies: tt.trusted}
			})
			resp, body := get(t, gw.URL+"/x", tt.in)
			if resp.StatusCode != 200 || body != "upstream" {
				t.Fatalf("GET: %d %q", resp.StatusCode, body)
			}
			got := up.lastHeader()
			for k, v := range tt.want {
				if v == "HOST" {
					v = strings.TrimPrefix(gw.URL, "http://")
				}
				if g := strings.Join(got.Values(k), ", "); g != v {
					t.Errorf("upstream saw %s = %q, want %q", k, g, v)
				}
			}
		})
	}
}

func TestQuotaHeadersReplaceTheUpstreams(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-RateLimit-Limit", "999")
		w.Header().Set("X-RateLimit-Remaining", "998")
		w.Header().Set("Retry-After", "7")
		w.Header().Set("X-Upstream", "yes")
		w.WriteHeader(503)
	})
	l := newLimiter(t, `
rules:
  - {id: api, match: {endpoint: "* /api/*"}, limit: 10, window: 1m}
`)
	gw := newGateway(t, l, up.URL, nil)
	resp, _ := get(t, gw.URL+"/api/x", nil)
	h := resp.Header
	if resp.StatusCode != 503 || strings.Join(h.Values("X-RateLimit-Limit"), ",") != "10" ||
		strings.Join(h.Values("X-RateLimit-Remaining"), ",") != "9" || h.Get("Retry-After") != "7" || h.Get("X-Upstream") != "yes" {
		t.Errorf("matched: %d %v, want 503 with the gateway's quota headers only, the upstream's Retry-After and X-Upstream", resp.StatusCode, h)
	}
	resp, _ = get(t, gw.URL+"/other", nil)
	if got := resp.Header.Get("X-RateLimit-Limit"); got != "999" {
		t.Errorf("unmatched: X-RateLimit-Limit %q, want the upstream's 999", got)
	}
}

type errorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

func TestUpstreamFailures(t *testing.T) {
	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close()

	release := make(chan struct{})
	slow := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)

	l := newLimiter(t, `
rules:
  - {id: all, limit: 100, window: 1m}
`)
	tests := []struct {
		name, target string
		wantStatus   int
		wantCode     string
	}{
		{"upstream down", down, 502, gateway.CodeBadGateway},
		{"upstream too slow", slow.URL, 504, gateway.CodeGatewayTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gw := newGateway(t, l, tt.target, func(c *gateway.Config) { c.ResponseTimeout = 200 * time.Millisecond })
			start := time.Now()
			resp, body := get(t, gw.URL+"/x", nil)
			var eb errorBody
			if err := json.Unmarshal([]byte(body), &eb); err != nil || resp.StatusCode != tt.wantStatus || eb.Error != tt.wantCode ||
				resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("GET = %d %s %q, want %d with error %q", resp.StatusCode, resp.Header.Get("Content-Type"), body, tt.wantStatus, tt.wantCode)
			}
			if resp.Header.Get("X-RateLimit-Limit") != "100" {
				t.Errorf("no quota headers on the %d: %v", resp.StatusCode, resp.Header)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("answered after %s", d)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	mustURL := func(s string) *url.URL { u, _ := url.Parse(s); return u }
	tests := []struct {
		name string
		cfg  gateway.Config
		want string
	}{
		{"no upstream", gateway.Config{}, "an upstream URL is required"},
		{"bad scheme", gateway.Config{Upstream: mustURL("ftp://x")}, "scheme must be http or https"},
		{"no host", gateway.Config{Upstream: mustURL("http:///x")}, "no host"},
		{"query", gateway.Config{Upstream: mustURL("http://x/?a=1")}, "query or fragment"},
		{"negative", gateway.Config{Upstream: mustURL("http://x"), DialTimeout: -1}, "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if err := (gateway.Config{Upstream: mustURL("https://api.internal:8443/v1")}).Validate(); err != nil {
		t.Errorf("Validate(valid) = %v", err)
	}
}

func TestUpstreamPathPrefix(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.URL.RequestURI()) })
	gw := newGateway(t, newLimiter(t, noRules), up.URL+"/v1/", nil)
	if _, body := get(t, gw.URL+"/orders?page=2", nil); body != "/v1/orders?page=2" {
		t.Errorf("upstream saw %q, want /v1/orders?page=2", body)
	}
}

// TestGatewayPeerTextAndUserAgent: the address the upstream is told
// (X-Forwarded-For) is the peer's, unmapped and without zone, however the
// connection spelled it; and the upstream sees the caller's User-Agent, or
// none — never Go's — when the call had none.
func TestGatewayPeerTextAndUserAgent(t *testing.T) {
	type seen struct{ xff, ua string }
	got := make(chan seen, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{strings.Join(r.Header["X-Forwarded-For"], "|"), strings.Join(r.Header["User-Agent"], "|")}
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	l := newLimiter(t, `
rules:
  - {id: per-ip, by: ip, limit: 1000, window: 1m}
`)
	gw, err := gateway.New(l, gateway.Config{Upstream: u})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	for _, c := range []struct{ remote, ua, wantXFF string }{
		{"192.0.2.7:5000", "", "192.0.2.7"},
		{"192.0.2.7:5000", "curl/8.5", "192.0.2.7"},
		{"192.0.2.9", "", "192.0.2.9"},
		{"[2001:db8::1]:5000", "", "2001:db8::1"},
		{"[::ffff:192.0.2.8]:5000", "", "192.0.2.8"},
		{"[fe80::1%eth0]:5000", "x", "fe80::1"},
	} {
		r := httptest.NewRequest("GET", "/api/orders", nil)
		r.RemoteAddr = c.remote
		if c.ua != "" {
			r.Header.Set("User-Agent", c.ua)
		}
		w := httptest.NewRecorder()
		gw.ServeHTTP(w, r)
		if w.Code != 200 {
			t.Fatalf("%s: status %d: %s", c.remote, w.Code, w.Body)
		}
		if s := <-got; s.xff != c.wantXFF || s.ua != c.ua {
			t.Errorf("%s, User-Agent %q: upstream saw X-Forwarded-For %q, User-Agent %q; want %q, %q", c.remote, c.ua, s.xff, s.ua, c.wantXFF, c.ua)
		}
	}
}

// TestStdEngine runs the gateway's tests again with --http-engine std:
// net/http's server and httputil.ReverseProxy serve and forward every
// call, and it limits, forwards and fails as the fast engine does. Left
// out: the tests of the fast engine's own connection handling (how many
// upstream connections, reuse past a response deadline, leftovers and
// the differential test, whose reference this engine is).
func TestStdEngine(t *testing.T) {
	testEngine = gateway.EngineStd
	defer func() { testEngine = "" }()
	for _, tt := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"HeadIsGet", TestHeadIsGet},
		{"PathsFold", TestPathsFold},
		{"TargetIsWhatTheUpstreamGets", TestTargetIsWhatTheUpstreamGets},
		{"ForwardingHeaders", TestForwardingHeaders},
		{"QuotaHeadersReplaceTheUpstreams", TestQuotaHeadersReplaceTheUpstreams},
		{"UpstreamFailures", TestUpstreamFailures},
		{"UpstreamPathPrefix", TestUpstreamPathPrefix},
		{"GatewayPeerTextAndUserAgent", TestGatewayPeerTextAndUserAgent},
		{"MatchHeadersAndMethodSets", TestMatchHeadersAndMethodSets},
		{"RuleChangesReachTheProxy", TestRuleChangesReachTheProxy},
		{"ForwardRequestBodies", TestForwardRequestBodies},
		{"ForwardAnswersWithoutBody", TestForwardAnswersWithoutBody},
		{"ForwardStreams", TestForwardStreams},
		{"ForwardTeTrailers", TestForwardTeTrailers},
		{"ForwardTrailers", TestForwardTrailers},
		{"ForwardBrokenAnswers", TestForwardBrokenAnswers},
		{"ForwardClientGone", TestForwardClientGone},
		{"ForwardUpgrade", TestForwardUpgrade},
		{"ForwardExpectContinue", TestForwardExpectContinue},
		{"ForwardConcurrentAnswersStayApart", TestForwardConcurrentAnswersStayApart},
		{"ForwardBoundsAnswerHeaders", TestForwardBoundsAnswerHeaders},
		{"ShapingHoldsUntilTheSlot", TestShapingHoldsUntilTheSlot},
	} {
		t.Run(tt.name, tt.fn)
	}
}
