package e2e

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicehq/sluice/internal/testkit/listentest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// gatewayProc is one `sluice gateway` process.
type gatewayProc struct {
	url   string // http://127.0.0.1:port of the proxy
	admin string // http://127.0.0.1:port of the admin API
	cmd   *exec.Cmd
	log   *bytes.Buffer
	mu    *sync.Mutex
}

// lockedBuffer is an io.Writer safe to read while a process writes it.
type lockedBuffer struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (b lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (g *gatewayProc) logs() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.log.String()
}

// startGateway starts `sluice gateway` in front of upstream with the rules
// file at rulesPath and extra flags, and waits until its admin API answers.
func startGateway(t testing.TB, rulesPath, upstream string, extra ...string) *gatewayProc {
	t.Helper()
	port, adminPort := listentest.FreePort(t), listentest.FreePort(t)
	g := &gatewayProc{
		url:   "http://127.0.0.1:" + strconv.Itoa(port),
		admin: "http://127.0.0.1:" + strconv.Itoa(adminPort),
		log:   &bytes.Buffer{},
		mu:    &sync.Mutex{},
	}
	args := append([]string{"gateway",
		"--listen", "127.0.0.1:" + strconv.Itoa(port),
		"--admin-listen", "127.0.0.1:" + strconv.Itoa(adminPort),
		"--rules", rulesPath, "--rules-poll", "100ms",
		"--upstream", upstream,
	}, extra...)
	g.cmd = exec.Command(binary, args...)
	g.cmd.Stdout, g.cmd.Stderr = lockedBuffer{g.mu, g.log}, lockedBuffer{g.mu, g.log}
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { g.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		g.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			g.cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(g.admin + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return g
			}
		}
		select {
		case <-exited:
			t.Fatalf("sluice gateway exited: %s", g.logs())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice gateway not healthy after 20s: %s", g.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// countingUpstream is an upstream that counts the calls it receives.
type countingUpstream struct {
	*httptest.Server
	calls atomic.Int64
}

func newCountingUpstream(t testing.TB, h http.HandlerFunc) *countingUpstream {
	u := &countingUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.calls.Add(1)
		if h != nil {
			h(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "hello from upstream\n")
	}))
	t.Cleanup(u.Close)
	return u
}

func writeRules(t testing.TB, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// gwCall is one call through the gateway: its status, headers and body.
type gwCall struct {
	status int
	header http.Header
	body   string
}

func gwDo(t testing.TB, method, url string, h map[string]string) gwCall {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
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
	return gwCall{resp.StatusCode, resp.Header, string(b)}
}

// passed makes n calls and returns how many the gateway let through (200).
func passed(t testing.TB, n int, method, url string, h func(i int) map[string]string) int {
	t.Helper()
	ok := 0
	for i := range n {
		var hh map[string]string
		if h != nil {
			hh = h(i)
		}
		c := gwDo(t, method, url, hh)
		switch c.status {
		case 200:
			ok++
		case 429:
		default:
			t.Fatalf("call %d: status %d %s", i, c.status, c.body)
		}
	}
	return ok
}

func absDiff(a, b string) int64 {
	x, _ := strconv.ParseInt(a, 10, 64)
	y, _ := strconv.ParseInt(b, 10, 64)
	if x > y {
		return x - y
	}
	return y - x
}

// TestGatewayAgreesWithCheckAPI: a gateway and a decision service on one
// Redis share the caller's bucket; the upstream sees only allowed calls;
// the 429 is the one docs/api.md describes and its headers are those POST /ratelimit/check
// reports for the same caller.
func TestGatewayAgreesWithCheckAPI(t *testing.T) {
	rdb := redistest.Start(t)
	rulesPath := writeRules(t, `
rules:
  - {id: orders-per-ip, match: {endpoint: "GET /api/orders"}, by: ip, limit: 5, window: 1h}
`)
	up := newCountingUpstream(t, nil)
	// A generous store deadline: this test compares the shared bucket's
	// answers, which a busy machine must not send to the local fallback.
	gw := startGateway(t, rulesPath, up.URL, "--redis", rdb.Addr(), "--store-timeout", "1s")
	svc := serve(t, rulesPath, "--redis", rdb.Addr(), "--store-timeout", "1s")
	check := map[string]any{"ip": "127.0.0.1", "endpoint": "GET /api/orders"}

	c := gwDo(t, "GET", gw.url+"/api/orders", nil)
	if c.status != 200 || c.body != "hello from upstream\n" || c.header.Get("X-RateLimit-Remaining") != "4" {
		t.Fatalf("first call: %d %q remaining %q, want 200 from the upstream, remaining 4", c.status, c.body, c.header.Get("X-RateLimit-Remaining"))
	}
	if a, _ := svc.check(t, check); !a.Allowed || a.Remaining != 3 {
		t.Fatalf("check after one gateway call: %+v, want allowed, remaining 3 (one shared bucket)", a)
	}
	if c := gwDo(t, "GET", gw.url+"/api/orders?x=1", nil); c.header.Get("X-RateLimit-Remaining") != "2" {
		t.Fatalf("gateway after a check: remaining %q, want 2", c.header.Get("X-RateLimit-Remaining"))
	}
	for range 2 {
		gwDo(t, "GET", gw.url+"/api/orders", nil)
	}
	denied := gwDo(t, "GET", gw.url+"/api/orders", nil)
	if got := up.calls.Load(); got != 4 {
		t.Errorf("upstream saw %d calls, want the 4 allowed ones", got)
	}
	if denied.status != 429 || denied.header.Get("Content-Type") != "application/json" {
		t.Fatalf("call over the limit: %d %s, want 429 application/json", denied.status, denied.header.Get("Content-Type"))
	}
	var body struct {
		Error      string `json:"error"`
		RetryAfter int64  `json:"retry_after"`
	}
	if err := json.Unmarshal([]byte(denied.body), &body); err != nil || body.Error != "rate_limit_exceeded" ||
		strconv.FormatInt(body.RetryAfter, 10) != denied.header.Get("Retry-After") || body.RetryAfter < 1 {
		t.Errorf("429 body %q (%v), Retry-After %q: want rate_limit_exceeded and the same retry_after ≥ 1",
			denied.body, err, denied.header.Get("Retry-After"))
	}

	a, h := svc.check(t, check)
	if a.Allowed || a.Remaining != 0 || a.Rule == nil || *a.Rule != "orders-per-ip" || a.Client == nil || *a.Client != "ip:127.0.0.1" {
		t.Fatalf("check for the same caller: %+v, want denied by orders-per-ip for ip:127.0.0.1", a)
	}
	for _, k := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "RateLimit-Policy"} {
		if g, w := denied.header.Get(k), h.Get(k); g != w || g == "" {
			t.Errorf("%s: gateway %q, check API %q", k, g, w)
		}
	}
	// Times may differ by the second that passed between the two answers.
	for _, k := range []string{"X-RateLimit-Reset", "Retry-After"} {
		if g, w := denied.header.Get(k), h.Get(k); g == "" || absDiff(g, w) > 1 {
			t.Errorf("%s: gateway %q, check API %q", k, g, w)
		}
	}
	if g, w := denied.header.Get("RateLimit"), h.Get("RateLimit"); !strings.HasPrefix(g, `"orders-per-ip";r=0;t=`) || !strings.HasPrefix(w, `"orders-per-ip";r=0;t=`) {
		t.Errorf("RateLimit: gateway %q, check API %q", g, w)
	}
	if wantMS := a.RetryAfterMS; (wantMS+999)/1000-body.RetryAfter > 1 || body.RetryAfter-(wantMS+999)/1000 > 1 {
		t.Errorf("retry_after %d s, check API retry_after_ms %d", body.RetryAfter, wantMS)
	}
}

// TestGatewayForwardedFor: without trusted proxies a spoofed
// X-Forwarded-For changes nothing; behind a trusted proxy the right-most
// untrusted address is the caller, and the upstream sees the chain with the
// peer appended.
func TestGatewayForwardedFor(t *testing.T) {
	rulesPath := writeRules(t, `
rules:
  - {id: per-client, by: client, limit: 3, window: 1h}
`)
	var mu sync.Mutex
	var seen []string
	up := newCountingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("X-Forwarded-For"))
		mu.Unlock()
	})

	t.Run("untrusted peer", func(t *testing.T) {
		gw := startGateway(t, rulesPath, up.URL)
		up.calls.Store(0)
		got := passed(t, 10, "GET", gw.url+"/", func(i int) map[string]string {
			return map[string]string{"X-Forwarded-For": fmt.Sprintf("203.0.113.%d", i), "Forwarded": fmt.Sprintf("for=198.51.100.%d", i)}
		})
		if got != 3 || up.calls.Load() != 3 {
			t.Errorf("10 calls with spoofed headers: %d passed, upstream saw %d; want 3 (one bucket: the peer's)", got, up.calls.Load())
		}
		mu.Lock()
		defer mu.Unlock()
		if last := seen[len(seen)-1]; last != "127.0.0.1" {
			t.Errorf("upstream saw X-Forwarded-For %q, want the chain restarted at the peer, 127.0.0.1", last)
		}
	})

	t.Run("trusted proxy", func(t *testing.T) {
		gw := startGateway(t, rulesPath, up.URL, "--trusted-proxies", "127.0.0.0/8,10.0.0.0/8")
		up.calls.Store(0)
		// Two clients behind a proxy chain, each writing junk to the left.
		got := passed(t, 10, "GET", gw.url+"/", func(i int) map[string]string {
			return map[string]string{"X-Forwarded-For": fmt.Sprintf("1.1.1.%d, 192.0.2.%d, 10.0.0.9", i, i%2)}
		})
		if got != 6 {
			t.Errorf("two clients behind trusted proxies: %d of 10 passed, want 3 each", got)
		}
		mu.Lock()
		if last := seen[len(seen)-1]; !strings.HasSuffix(last, ", 10.0.0.9, 127.0.0.1") {
			t.Errorf("upstream saw X-Forwarded-For %q, want the chain with the peer appended", last)
		}
		mu.Unlock()
	})
}

// TestGatewayRandomAPIKeys: inventing API keys does not escape the per-IP
// rule; a registered key gets its own plan.
func TestGatewayRandomAPIKeys(t *testing.T) {
	rulesPath := writeRules(t, `
default_plan: free
clients:
  "api_key:k_live_42": {plan: partner}
rules:
  - {id: free-per-ip, match: {plan: free}, by: ip, limit: 3, window: 1h}
  - {id: partner-per-key, match: {plan: partner}, by: api_key, limit: 5, window: 1h}
`)
	up := newCountingUpstream(t, nil)
	gw := startGateway(t, rulesPath, up.URL)
	got := passed(t, 10, "GET", gw.url+"/api", func(i int) map[string]string {
		return map[string]string{"X-API-Key": fmt.Sprintf("k_random_%d_%d", i, time.Now().UnixNano())}
	})
	if got != 3 || up.calls.Load() != 3 {
		t.Errorf("10 random API keys from one IP: %d passed, upstream saw %d; want 3", got, up.calls.Load())
	}
	got = passed(t, 8, "GET", gw.url+"/api", func(int) map[string]string { return map[string]string{"X-API-Key": "k_live_42"} })
	if got != 5 {
		t.Errorf("registered key: %d of 8 passed, want 5 (partner plan, per key)", got)
	}
}

// TestGatewayJWT: a valid token is limited per user under its plan claim;
// a forged, expired, not-yet-valid, alg "none" or wrongly signed token is
// limited as anonymous, per IP. Each case comes from its own address
// (through a trusted proxy) so that each has its own per-IP bucket.
func TestGatewayJWT(t *testing.T) {
	rulesPath := writeRules(t, `
default_plan: free
rules:
  - {id: anon-per-ip, match: {plan: free}, by: ip, limit: 2, window: 1h}
  - {id: pro-per-user, match: {plan: pro}, by: user, limit: 4, window: 1h}
`)
	secret := []byte("e2e-secret-of-at-least-32-bytes!!")
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherEC, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecPub, _ := ecKey.PublicKey.Bytes()
	b64 := base64.RawURLEncoding.EncodeToString
	jwks, _ := json.Marshal(map[string]any{"keys": []map[string]string{
		{"kty": "RSA", "kid": "rsa-1", "use": "sig", "alg": "RS256", "n": b64(rsaKey.N.Bytes()), "e": b64(big.NewInt(int64(rsaKey.E)).Bytes())},
		{"kty": "EC", "kid": "ec-1", "crv": "P-256", "x": b64(ecPub[1:33]), "y": b64(ecPub[33:])},
	}})
	jwksPath := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(jwksPath, jwks, 0o600); err != nil {
		t.Fatal(err)
	}

	now := time.Now()
	claims := func(sub string, mod func(jwt.MapClaims)) jwt.MapClaims {
		c := jwt.MapClaims{"sub": sub, "plan": "pro", "exp": now.Add(time.Hour).Unix(), "iat": now.Add(-time.Minute).Unix()}
		if mod != nil {
			mod(c)
		}
		return c
	}
	sign := func(m jwt.SigningMethod, key any, kid string, c jwt.MapClaims) string {
		tok := jwt.NewWithClaims(m, c)
		if kid != "" {
			tok.Header["kid"] = kid
		}
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	forge := func(tok string) string { // another payload under the original signature
		p := strings.Split(tok, ".")
		payload, _ := json.Marshal(claims("mallory", nil))
		return p[0] + "." + b64(payload) + "." + p[2]
	}

	up := newCountingUpstream(t, nil)
	for _, mode := range []struct {
		name  string
		flags []string
		valid func(sub string) string
	}{
		{"hs256", []string{"--jwt-hs256-secret", string(secret)}, func(sub string) string {
			return sign(jwt.SigningMethodHS256, secret, "", claims(sub, nil))
		}},
		{"jwks-rs256", []string{"--jwt-public-keys", jwksPath}, func(sub string) string {
			return sign(jwt.SigningMethodRS256, rsaKey, "rsa-1", claims(sub, nil))
		}},
		{"jwks-es256", []string{"--jwt-public-keys", jwksPath}, func(sub string) string {
			return sign(jwt.SigningMethodES256, ecKey, "ec-1", claims(sub, nil))
		}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			gw := startGateway(t, rulesPath, up.URL, append([]string{"--trusted-proxies", "127.0.0.1"}, mode.flags...)...)
			ip := 0
			from := func(auth string) func(int) map[string]string {
				ip++
				addr := fmt.Sprintf("203.0.113.%d", ip)
				return func(i int) map[string]string {
					return map[string]string{"Authorization": "Bearer " + auth, "X-Forwarded-For": addr}
				}
			}
			// A valid token: per user, 4 on the pro plan, whatever the address.
			valid := mode.valid("alice")
			ok := 0
			for i := range 8 {
				c := gwDo(t, "GET", gw.url+"/", map[string]string{"Authorization": "Bearer " + valid, "X-Forwarded-For": fmt.Sprintf("198.51.100.%d", i)})
				if c.status == 200 {
					ok++
					if p := c.header.Get("RateLimit-Policy"); p != `"pro-per-user";q=4;w=3600` {
						t.Errorf("valid token: RateLimit-Policy %q, want the pro-per-user rule", p)
					}
				}
			}
			if ok != 4 {
				t.Errorf("valid token from 8 addresses: %d passed, want 4 (pro-per-user)", ok)
			}
			bad := map[string]string{
				"forged":                      forge(mode.valid("bob")),
				"expired":                     sign(jwt.SigningMethodHS256, secret, "", claims("bob", func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Minute).Unix() })),
				"not yet valid":               sign(jwt.SigningMethodHS256, secret, "", claims("bob", func(c jwt.MapClaims) { c["nbf"] = now.Add(time.Hour).Unix() })),
				"alg none":                    sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "", claims("bob", nil)),
				"wrongly signed":              sign(jwt.SigningMethodES256, otherEC, "ec-1", claims("bob", nil)),
				"HS256 with the wrong secret": sign(jwt.SigningMethodHS256, []byte("not-the-secret-but-32-bytes-long"), "", claims("bob", nil)),
				"garbage":                     "abc.def.ghi",
			}
			if mode.name != "hs256" {
				// Against public keys, HS256 is refused even with the right secret.
				bad["expired"] = sign(jwt.SigningMethodRS256, rsaKey, "rsa-1", claims("bob", func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Minute).Unix() }))
				bad["not yet valid"] = sign(jwt.SigningMethodES256, ecKey, "ec-1", claims("bob", func(c jwt.MapClaims) { c["nbf"] = now.Add(time.Hour).Unix() }))
				bad["HS256 against public keys"] = sign(jwt.SigningMethodHS256, secret, "", claims("bob", nil))
			}
			for name, tok := range bad {
				if got := passed(t, 5, "GET", gw.url+"/", from(tok)); got != 2 {
					t.Errorf("%s token: %d of 5 passed, want 2 (anonymous, per IP)", name, got)
				}
			}
		})
	}
}

// zeros is a request body of n zero bytes made as it is read, counting
// what was read.
type zeros struct {
	n    int64
	read atomic.Int64
}

func (z *zeros) Read(p []byte) (int, error) {
	left := z.n - z.read.Load()
	if left <= 0 {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), left))
	clear(p[:n])
	z.read.Add(int64(n))
	return n, nil
}

// TestGatewayLargeUploadRefusedUnread: a 1 GiB upload over the limit is
// answered 429 at once, without the gateway reading its body; with
// Expect: 100-continue the client sends none of it.
func TestGatewayLargeUploadRefusedUnread(t *testing.T) {
	rulesPath := writeRules(t, `
rules:
  - {id: uploads, match: {endpoint: "POST /upload"}, by: ip, limit: 1, window: 1h}
`)
	var received atomic.Int64
	up := newCountingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		received.Add(n)
	})
	gw := startGateway(t, rulesPath, up.URL)

	// The one allowed upload, 8 MiB, streams through to the upstream.
	resp, err := http.Post(gw.url+"/upload", "application/octet-stream", io.LimitReader(&zeros{n: 8 << 20}, 8<<20))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || received.Load() != 8<<20 {
		t.Fatalf("allowed upload: %d, upstream received %d bytes, want 200 and %d", resp.StatusCode, received.Load(), 8<<20)
	}

	for _, expect := range []bool{false, true} {
		t.Run(fmt.Sprintf("expect-continue=%v", expect), func(t *testing.T) {
			const size = 1 << 30
			conn, err := net.Dial("tcp", strings.TrimPrefix(gw.url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			head := "POST /upload HTTP/1.1\r\nHost: gw\r\nContent-Type: application/octet-stream\r\nContent-Length: " + strconv.Itoa(size) + "\r\n"
			if expect {
				head += "Expect: 100-continue\r\n"
			}
			start := time.Now()
			if _, err := io.WriteString(conn, head+"\r\n"); err != nil {
				t.Fatal(err)
			}
			body := &zeros{n: size}
			copied := make(chan error, 1)
			if expect {
				copied <- nil
			} else {
				// Send the body as fast as the connection takes it, as a
				// client that does not wait for an answer would.
				go func() { _, err := io.Copy(conn, body); copied <- err }()
			}
			conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("reading the answer: %v (client had sent %d bytes)", err, body.read.Load())
			}
			elapsed := time.Since(start)
			res.Body.Close()
			sentBy429 := body.read.Load()
			// The gateway closes the connection rather than read the rest:
			// the client's sending fails long before the body's end.
			var copyErr error
			select {
			case copyErr = <-copied:
			case <-time.After(30 * time.Second):
				t.Fatal("the client was still sending the body 30 s after the 429: the gateway is reading it")
			}
			sent := body.read.Load()
			t.Logf("1 GiB upload over the limit: 429 after %s with %d bytes of the body sent; the client could send %d bytes (%.3f%%) in all before the gateway closed the connection (%v)",
				elapsed.Round(time.Microsecond), sentBy429, sent, 100*float64(sent)/size, copyErr)
			if res.StatusCode != 429 || res.Header.Get("Retry-After") == "" || res.Header.Get("X-RateLimit-Remaining") != "0" {
				t.Fatalf("status %d, headers %v, want 429 with Retry-After and the quota headers", res.StatusCode, res.Header)
			}
			if !expect && copyErr == nil {
				t.Error("the client sent the whole 1 GiB body, want the connection closed on it")
			}
			if sent > 64<<20 {
				t.Errorf("the client sent %d bytes, want the body refused unread (≤ 64 MiB of socket buffers)", sent)
			}
			if expect && sent != 0 {
				t.Errorf("with Expect: 100-continue the client sent %d bytes, want 0", sent)
			}
			if elapsed > 5*time.Second {
				t.Errorf("429 after %s, want at once", elapsed)
			}
		})
	}
	if got := up.calls.Load(); got != 1 {
		t.Errorf("upstream saw %d calls, want the 1 allowed upload", got)
	}
}

// TestGatewayStreams: a response is passed on as the upstream writes it,
// not when it ends.
func TestGatewayStreams(t *testing.T) {
	rulesPath := writeRules(t, "rules: []\n")
	release := make(chan struct{})
	up := newCountingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
		io.WriteString(w, "second\n")
	})
	gw := startGateway(t, rulesPath, up.URL)
	resp, err := http.Get(gw.url + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "first\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	close(release) // the first line arrived while the upstream was still writing
	if rest, _ := io.ReadAll(br); string(rest) != "second\n" {
		t.Errorf("rest %q, want second", rest)
	}
}

// TestGatewayWebSocket: an Upgrade: websocket handshake passes through,
// with the quota headers on the 101, and bytes flow both ways after it.
func TestGatewayWebSocket(t *testing.T) {
	rulesPath := writeRules(t, `
rules:
  - {id: ws, match: {endpoint: "GET /ws"}, by: ip, limit: 2, window: 1h}
`)
	up := newCountingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			http.Error(w, "want an upgrade", 400)
			return
		}
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		sum := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
			base64.StdEncoding.EncodeToString(sum[:]))
		rw.Flush()
		io.Copy(conn, rw) // echo until the client closes
	})
	gw := startGateway(t, rulesPath, up.URL)

	handshake := func() (*http.Response, net.Conn, *bufio.Reader) {
		conn, err := net.Dial("tcp", strings.TrimPrefix(gw.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: gw\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
		br := bufio.NewReader(conn)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res, conn, br
	}
	for i := range 2 {
		res, conn, br := handshake()
		if res.StatusCode != 101 || res.Header.Get("Sec-WebSocket-Accept") != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" ||
			res.Header.Get("X-RateLimit-Remaining") != strconv.Itoa(1-i) {
			t.Fatalf("handshake %d: %d %v, want 101 with the upstream's accept key and the quota headers", i+1, res.StatusCode, res.Header)
		}
		msg := fmt.Sprintf("hello %d, through the gateway", i)
		io.WriteString(conn, msg)
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != msg {
			t.Errorf("echo %q, %v, want %q", got, err, msg)
		}
		conn.Close()
	}
	res, conn, _ := handshake()
	conn.Close()
	if res.StatusCode != 429 {
		t.Errorf("third handshake: %d, want 429", res.StatusCode)
	}
	if got := up.calls.Load(); got != 2 {
		t.Errorf("upstream saw %d handshakes, want 2", got)
	}
}

// TestGatewayUpstreamFailures: 502 when nothing listens upstream, 504
// when the upstream does not answer within --upstream-timeout.
func TestGatewayUpstreamFailures(t *testing.T) {
	rulesPath := writeRules(t, "rules: []\n")
	down := "http://" + listentest.FreeAddr(t)
	release := make(chan struct{})
	slow := newCountingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	for _, tt := range []struct {
		name, upstream string
		status         int
		code           string
	}{
		{"down", down, 502, "bad_gateway"},
		{"timeout", slow.URL, 504, "gateway_timeout"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			gw := startGateway(t, rulesPath, tt.upstream, "--upstream-timeout", "300ms", "--upstream-dial-timeout", "1s")
			c := gwDo(t, "GET", gw.url+"/x", nil)
			var eb struct{ Error, Message string }
			if err := json.Unmarshal([]byte(c.body), &eb); err != nil || c.status != tt.status || eb.Error != tt.code ||
				c.header.Get("Content-Type") != "application/json" {
				t.Errorf("GET: %d %q, want %d with {\"error\":%q}", c.status, c.body, tt.status, tt.code)
			}
		})
	}
}

// TestGatewayPythonUpstream: a real third-party server, python3 -m
// http.server, behind the gateway: it serves the allowed calls and never
// logs a denied one.
func TestGatewayPythonUpstream(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		if _, serr := os.Stat("/usr/bin/python3"); serr != nil {
			t.Skip("python3 is not installed: the http.server upstream test needs it")
		}
		py = "/usr/bin/python3"
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hello from python\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	port := listentest.FreePort(t)
	var log bytes.Buffer
	var mu sync.Mutex
	cmd := exec.Command(py, "-u", "-m", "http.server", strconv.Itoa(port), "--bind", "127.0.0.1", "--directory", dir)
	cmd.Stdout, cmd.Stderr = lockedBuffer{&mu, &log}, lockedBuffer{&mu, &log}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pyURL := "http://127.0.0.1:" + strconv.Itoa(port)
	for deadline := time.Now().Add(20 * time.Second); ; {
		if c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			mu.Lock()
			t.Fatalf("python3 -m http.server did not start: %s", log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	logged := func() int {
		mu.Lock()
		defer mu.Unlock()
		return strings.Count(log.String(), `"GET /hello.txt HTTP/1.1" 200`)
	}

	rulesPath := writeRules(t, `
rules:
  - {id: files, match: {endpoint: "GET /hello.txt"}, by: ip, limit: 3, window: 1h}
`)
	gw := startGateway(t, rulesPath, pyURL)
	var statuses []int
	for range 6 {
		c := gwDo(t, "GET", gw.url+"/hello.txt", nil)
		statuses = append(statuses, c.status)
		if c.status == 200 && (c.body != "hello from python\n" || c.header.Get("X-RateLimit-Limit") != "3" || c.header.Get("Server") == "") {
			t.Errorf("allowed call: body %q, headers %v; want python's file, its Server header and the quota headers", c.body, c.header)
		}
	}
	if fmt.Sprint(statuses) != "[200 200 200 429 429 429]" {
		t.Errorf("statuses %v, want 3 × 200 then 3 × 429", statuses)
	}
	// python logs each request after answering it: wait for the three.
	for deadline := time.Now().Add(5 * time.Second); logged() < 3 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if n := logged(); n != 3 {
		mu.Lock()
		t.Errorf("python logged %d requests for /hello.txt, want the 3 allowed ones:\n%s", n, log.String())
		mu.Unlock()
	}
}

// TestGatewayRedisDown: with its Redis killed, the gateway keeps answering
// without a hang. For a caller it has not seen denied, a fail-open rule
// falls back to the coarse local limit (a fresh local bucket of
// limit/instances: the calls it lets through reach the upstream, with
// quota headers; then 429); a fail-closed rule denies every call with 429
// and Retry-After, and the upstream never sees those. A caller Redis had
// denied stays denied (the local denial cache is exact).
func TestGatewayRedisDown(t *testing.T) {
	rdb := redistest.Start(t)
	rulesPath := writeRules(t, `
rules:
  - {id: open-per-ip, match: {endpoint: "GET /api/open"}, by: ip, limit: 3, window: 1h}
  - {id: closed-per-ip, match: {endpoint: "GET /api/closed"}, by: ip, limit: 3, window: 1h, failure_mode: closed}
`)
	var openCalls, closedCalls atomic.Int64
	up := newCountingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/closed" {
			closedCalls.Add(1)
		} else {
			openCalls.Add(1)
		}
		io.WriteString(w, "ok\n")
	})
	gw := startGateway(t, rulesPath, up.URL, "--redis", rdb.Addr(), "--instances", "1", "--store-timeout", "50ms",
		"--trusted-proxies", "127.0.0.1")
	from := func(ip string) func(int) map[string]string {
		return func(int) map[string]string { return map[string]string{"X-Forwarded-For": ip} }
	}

	if got := passed(t, 4, "GET", gw.url+"/api/open", from("10.0.0.1")); got != 3 {
		t.Fatalf("with Redis up: %d of 4 calls passed, want 3", got)
	}
	if got := passed(t, 1, "GET", gw.url+"/api/closed", from("10.0.0.1")); got != 1 {
		t.Fatalf("with Redis up: the fail-closed rule let %d of 1 call through, want 1", got)
	}
	rdb.Kill()
	closedBefore := closedCalls.Load()

	start := time.Now()
	fresh := map[string]string{"X-Forwarded-For": "10.0.0.2"}
	var open []gwCall
	for range 5 {
		open = append(open, gwDo(t, "GET", gw.url+"/api/open", fresh))
	}
	var closed []gwCall
	for range 3 {
		closed = append(closed, gwDo(t, "GET", gw.url+"/api/closed", fresh))
	}
	if c := gwDo(t, "GET", gw.url+"/api/open", map[string]string{"X-Forwarded-For": "10.0.0.1"}); c.status != 429 {
		t.Errorf("the caller Redis had denied, with Redis down: %d %s, want 429", c.status, c.body)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("8 calls with Redis down took %s, want no hang", took)
	}
	allowed := 0
	for i, c := range open {
		switch c.status {
		case 200:
			allowed++
			if c.header.Get("X-RateLimit-Limit") == "" || c.header.Get("RateLimit-Policy") == "" {
				t.Errorf("fail-open call %d passed without quota headers: %v", i, c.header)
			}
		case 429:
			if c.header.Get("Retry-After") == "" {
				t.Errorf("fail-open call %d denied without Retry-After", i)
			}
		default:
			t.Errorf("fail-open call %d with Redis down: %d %s, want 200 or 429", i, c.status, c.body)
		}
	}
	// The local bucket is the rule's whole limit (one instance), new: the
	// first calls pass, at most 3, and the calls that fell between the kill
	// and the breaker opening were decided the same way.
	if allowed < 1 || allowed > 3 {
		t.Errorf("fail-open rule with Redis down: %d of 5 calls passed, want 1 to 3 (the coarse local limit)", allowed)
	}
	if got := openCalls.Load(); got != int64(3+allowed) {
		t.Errorf("upstream saw %d fail-open calls, want the %d allowed", got, 3+allowed)
	}
	for i, c := range closed {
		if c.status != 429 || c.header.Get("Retry-After") == "" || !strings.Contains(c.body, "store_unavailable") && !strings.Contains(c.body, "rate_limit") {
			t.Errorf("fail-closed call %d with Redis down: %d %q Retry-After %q, want 429 with Retry-After", i, c.status, c.body, c.header.Get("Retry-After"))
		}
	}
	if got := closedCalls.Load() - closedBefore; got != 0 {
		t.Errorf("upstream saw %d fail-closed calls with Redis down, want 0", got)
	}
}
