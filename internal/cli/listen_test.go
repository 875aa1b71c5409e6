package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/testkit/listentest"
)

// perUser is a rules file: 1000 calls a day per user (a token back
// every 86 s: none comes back during a test).
const perUser = `rules:
  - id: per-user
    by: user
    limit: 1000
    window: 24h
`

// started is a sluice command running in the test's process.
type started struct {
	stderr *lockedBuffer
	done   chan struct{} // closed when the command returned
	code   int           // its exit code, once done
}

// start runs the sluice command args until the test ends.
func start(t *testing.T, args ...string) *started {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &started{stderr: &lockedBuffer{}, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		root := NewRoot()
		root.SetOut(io.Discard)
		root.SetErr(s.stderr)
		s.code = run(ctx, root, args, s.stderr)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.done:
		case <-time.After(20 * time.Second):
			t.Errorf("sluice %v did not stop within 20 s of its context", args)
		}
	})
	return s
}

// waitUp polls url with c until it answers, or fails the test after 15 s
// or when the command exits.
func (s *started) waitUp(t *testing.T, c *http.Client, url string) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case <-s.done:
			t.Fatalf("sluice exited %d before serving: %s", s.code, s.stderr)
		default:
		}
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			return
		}
	}
	t.Fatalf("%s did not answer within 15 s: %s", url, s.stderr)
}

// check posts a decision call to base with the Authorization header auth
// (none when "") and returns the status and body.
func check(t *testing.T, c *http.Client, base, auth, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", base+"/ratelimit/check", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s/ratelimit/check: %v", base, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

var aliceRLS = &rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: []*ratelimitv3.RateLimitDescriptor{
	{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}}},
}}

// TestServeDataToken: with --data-token, a stranger's call of cost =
// limit is refused 401 (and on gRPC Unauthenticated) without touching the
// victim's bucket; a call with either of the tokens is decided; the health
// endpoints stay open.
func TestServeDataToken(t *testing.T) {
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", perUser)
	data, grpcAddr, admin := listentest.FreeAddr(t), listentest.FreeAddr(t), listentest.FreeAddr(t)
	s := start(t, "serve", "--rules", rules, "--listen", data, "--grpc-listen", grpcAddr, "--admin-listen", admin,
		"--data-token", "old-token, new-token")
	base := "http://" + data
	s.waitUp(t, http.DefaultClient, base+"/healthz")

	for _, auth := range []string{"", "Bearer wrong", "old-token", "Basic b2xkLXRva2Vu"} {
		code, body := check(t, http.DefaultClient, base, auth, `{"user":"alice","cost":1000}`)
		if code != http.StatusUnauthorized || !strings.Contains(body, "--data-token") {
			t.Errorf("a drain call with Authorization %q = %d %s, want 401 naming --data-token", auth, code, body)
		}
	}
	cc, err := grpc.NewClient("passthrough:///"+grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	rls := rlsv3.NewRateLimitServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	drain := &rlsv3.RateLimitRequest{Domain: "sluice", HitsAddend: 1000, Descriptors: aliceRLS.Descriptors}
	if _, err := rls.ShouldRateLimit(ctx, drain); status.Code(err) != codes.Unauthenticated {
		t.Errorf("ShouldRateLimit without a token = %v, want Unauthenticated", err)
	}

	for i, auth := range []string{"Bearer old-token", "Bearer new-token"} {
		code, body := check(t, http.DefaultClient, base, auth, `{"user":"alice"}`)
		if want := fmt.Sprintf(`"remaining":%d`, 999-i); code != 200 || !strings.Contains(body, want) {
			t.Errorf("a call with %q = %d %s, want 200 with %s: the strangers' calls took nothing", auth, code, body, want)
		}
	}
	resp, err := rls.ShouldRateLimit(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer new-token"), aliceRLS)
	if err != nil || resp.Statuses[0].LimitRemaining != 997 {
		t.Errorf("ShouldRateLimit with the token = %v, %v; want OK with 997 left", resp, err)
	}
	// The Go client, with and without the token.
	if d, err := client.New(base, client.WithToken("old-token")).Check(ctx, client.CheckRequest{User: "alice"}); err != nil || d.Remaining != 996 {
		t.Errorf("client.Check with the token = %+v, %v; want 996 left", d, err)
	}
	var ce *client.Error
	if _, err := client.New(base).Check(ctx, client.CheckRequest{User: "alice"}); !errors.As(err, &ce) || ce.Status != 401 || ce.Code != "unauthorized" {
		t.Errorf("client.Check without the token = %v, want a 401 unauthorized *client.Error", err)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		r, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != 200 {
			t.Errorf("GET %s without a token = %d, want 200: health stays open", path, r.StatusCode)
		}
	}
	if r, err := http.Get(base + "/metrics"); err != nil || r.StatusCode != 401 {
		t.Errorf("GET /metrics without a token = %v, %v; want 401", r, err)
	} else {
		r.Body.Close()
	}
}

// TestServeRefusesBlankDataToken: a --data-token that parses to no token
// stops serve at start, naming the flag, rather than leaving the data
// plane open.
func TestServeRefusesBlankDataToken(t *testing.T) {
	rules := writeFile(t, t.TempDir(), "rules.yaml", perUser)
	for _, tok := range []string{" ", ",", " , ", "a,,b", "a,"} {
		code, _, stderr := sluice(t, "", "serve", "--rules", rules, "--listen", "127.0.0.1:0", "--grpc-listen", "", "--admin-listen", "127.0.0.1:0", "--data-token", tok)
		if code != 1 || !strings.Contains(stderr, "--data-token") || !strings.Contains(stderr, "blank") {
			t.Errorf("serve --data-token %q = %d, %q; want exit 1 naming --data-token as blank", tok, code, stderr)
		}
	}
}

// TestServeTLS: every listener of serve speaks TLS with the files of its
// flags; the data plane with a client CA refuses a client without a
// certificate; sluice rules reaches a TLS admin API with --admin-ca (and
// not without); a certificate replaced on disk is served without a
// restart.
func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	ca, clients := listentest.NewCA(t, "server CA"), listentest.NewCA(t, "client CA")
	cert, key := ca.Server(t).Files(t, dir, "data")
	adminCert, adminKey := ca.Server(t).Files(t, dir, "admin")
	caFile, clientCA := ca.File(t), clients.File(t)
	rules := writeFile(t, dir, "rules.yaml", perUser)
	data, grpcAddr, admin := listentest.FreeAddr(t), listentest.FreeAddr(t), listentest.FreeAddr(t)
	s := start(t, "serve", "--rules", rules, "--listen", data, "--grpc-listen", grpcAddr, "--admin-listen", admin,
		"--tls-cert", cert, "--tls-key", key, "--tls-client-ca", clientCA,
		"--admin-tls-cert", adminCert, "--admin-tls-key", adminKey)
	envoy := clients.Client(t, "envoy").TLS(t)
	withCert := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{envoy}}}}
	s.waitUp(t, withCert, "https://"+data+"/healthz")

	if code, body := check(t, withCert, "https://"+data, "", `{"user":"alice"}`); code != 200 || !strings.Contains(body, `"remaining":999`) {
		t.Errorf("a decision over mutual TLS = %d %s, want 200 with 999 left", code, body)
	}
	noCert := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	if resp, err := noCert.Get("https://" + data + "/healthz"); err == nil {
		resp.Body.Close()
		t.Errorf("a client without a certificate got %d from the data plane, want the handshake refused", resp.StatusCode)
	}
	if resp, err := http.Get("http://" + data + "/healthz"); err == nil && resp.StatusCode == 200 {
		resp.Body.Close()
		t.Error("the data plane answered plain HTTP with --tls-cert")
	}

	cc, err := grpc.NewClient("passthrough:///"+grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(
		&tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{envoy}})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if resp, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, aliceRLS); err != nil || resp.Statuses[0].LimitRemaining != 998 {
		t.Errorf("ShouldRateLimit over mutual TLS = %v, %v; want OK with 998 left", resp, err)
	}

	adminURL := "https://" + admin
	if code, out, stderr := sluice(t, "", "rules", "list", "--admin", adminURL, "--admin-ca", caFile); code != 0 || !strings.Contains(out, "per-user") {
		t.Errorf("sluice rules list --admin-ca = %d, %q, %q; want the rule listed", code, out, stderr)
	}
	if code, _, stderr := sluice(t, "", "rules", "list", "--admin", adminURL); code != 1 || !strings.Contains(stderr, "certificate") {
		t.Errorf("sluice rules list without --admin-ca = %d, %q; want a certificate error", code, stderr)
	}

	// The admin certificate is renewed on disk.
	served := func() string {
		c, err := tls.Dial("tcp", admin, &tls.Config{RootCAs: ca.Pool()})
		if err != nil {
			t.Fatalf("TLS handshake with the admin API: %v", err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := served()
	renewed := ca.Server(t)
	renewed.WriteTo(t, adminCert, adminKey)
	if got, want := served(), renewed.Cert.SerialNumber.String(); got != want {
		t.Errorf("after the admin certificate was replaced, the admin API served %s (before: %s), want the new %s", got, before, want)
	}
}

// TestServeTLSFlagErrors: half a TLS configuration stops serve at start,
// naming the flag that is missing.
func TestServeTLSFlagErrors(t *testing.T) {
	dir := t.TempDir()
	cert, key := listentest.NewCA(t, "ca").Server(t).Files(t, dir, "s")
	rules := writeFile(t, dir, "rules.yaml", perUser)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", cert}, "--tls-cert needs --tls-key"},
		{[]string{"--admin-tls-key", key}, "--admin-tls-key needs --admin-tls-cert"},
		{[]string{"--tls-client-ca", cert}, "--tls-client-ca needs --tls-cert and --tls-key"},
		{[]string{"--body-timeout", "0s"}, "--body-timeout must be at least 1ms"},
		{[]string{"--max-header-bytes", "10"}, "--max-header-bytes must be at least 1024"},
	} {
		args := append([]string{"serve", "--rules", rules, "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, tt.args...)
		if code, _, stderr := sluice(t, "", args...); code != 1 || !strings.Contains(stderr, tt.want) {
			t.Errorf("sluice %v = %d, %q; want exit 1 and %q", tt.args, code, stderr, tt.want)
		}
	}
}

// trickle opens n connections to addr with listentest.Trickle, each
// sending head and then one byte every gap, and returns how many were
// still open after limit, what the closed ones were answered, and the
// longest a closed one stayed open after its headers were sent.
func trickle(t *testing.T, addr, head string, n int, gap, limit time.Duration) (open int, answers []string, slowest time.Duration) {
	t.Helper()
	conns := make([]<-chan listentest.Trickled, n)
	for i := range conns {
		conns[i] = listentest.Trickle(t, addr, head, int(limit/gap)+1, gap, limit)
	}
	for _, c := range conns {
		r := <-c
		if r.Open {
			open++
			continue
		}
		answers = append(answers, r.Answer)
		slowest = max(slowest, r.After)
	}
	return open, answers, slowest
}

// TestServeSlowClients: 200 connections that send a decision call's
// headers and then trickle its body, and as many that never finish their
// headers, are closed by the data plane within --body-timeout and
// --read-header-timeout; a decision made meanwhile is answered.
func TestServeSlowClients(t *testing.T) {
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", perUser)
	data, admin := listentest.FreeAddr(t), listentest.FreeAddr(t)
	s := start(t, "serve", "--rules", rules, "--listen", data, "--grpc-listen", "", "--admin-listen", admin,
		"--read-header-timeout", "500ms", "--body-timeout", "1s", "--idle-timeout", "1s")
	s.waitUp(t, http.DefaultClient, "http://"+data+"/healthz")

	const n, limit = 200, 15 * time.Second // limit: far above the 1 s configured, for a loaded machine
	type result struct {
		open    int
		answer  string
		slowest time.Duration
	}
	results := make(map[string]chan result)
	for name, tt := range map[string]struct{ addr, head string }{
		"slow body":    {data, "POST /ratelimit/check HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"},
		"slow headers": {data, "POST /ratelimit/check HTTP/1.1\r\nHost: x\r\n"},
		"admin body":   {admin, "PUT /rules/x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"},
	} {
		ch := make(chan result, 1)
		results[name] = ch
		go func() {
			open, answers, slowest := trickle(t, tt.addr, tt.head, n, 2*time.Second, limit)
			r := result{open: open, slowest: slowest}
			if len(answers) > 0 {
				r.answer = answers[0]
			}
			ch <- r
		}()
	}
	time.Sleep(200 * time.Millisecond) // the slow connections are open
	decided := make(chan string, 1)
	go func() {
		code, body := check(t, &http.Client{Timeout: limit}, "http://"+data, "", `{"user":"alice"}`)
		decided <- strconv.Itoa(code) + " " + body
	}()
	select {
	case got := <-decided:
		if !strings.HasPrefix(got, "200 ") {
			t.Errorf("a decision among the slow connections = %s, want 200", got)
		}
	case <-time.After(limit):
		t.Errorf("a decision among %d slow connections was not answered within %s", 3*n, limit)
	}
	for name, ch := range results {
		r := <-ch
		if r.open > 0 {
			t.Errorf("%s: %d of %d connections still open after %s; want every one closed after about 1 s", name, r.open, n, limit)
		}
		t.Logf("%s: %d connections, each closed at most %s after its headers; the first was answered %q", name, n, r.slowest.Round(time.Millisecond), firstLine(r.answer))
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\r\n")
	return l
}

// TestGatewaySlowBodies: 200 uploads trickled through the gateway below
// --min-body-rate are answered 408 and closed once --body-rate-grace has
// passed; a call made meanwhile is proxied.
func TestGatewaySlowBodies(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)   //nolint:errcheck
		io.WriteString(w, "upstream") //nolint:errcheck
	}))
	defer up.Close()
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", perUser)
	proxy := listentest.FreeAddr(t)
	s := start(t, "gateway", "--upstream", up.URL, "--rules", rules, "--listen", proxy,
		"--min-body-rate", "100", "--body-rate-grace", "1s", "--read-header-timeout", "500ms")
	s.waitUp(t, http.DefaultClient, "http://"+proxy+"/ready")

	const n, limit = 200, 15 * time.Second
	type result struct {
		open    int
		answers []string
	}
	done := make(chan result, 1)
	go func() {
		open, answers, slowest := trickle(t, proxy, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n", n, 500*time.Millisecond, limit)
		t.Logf("%d trickled uploads, each closed at most %s after its headers", n, slowest.Round(time.Millisecond))
		done <- result{open, answers}
	}()
	time.Sleep(200 * time.Millisecond)
	resp, err := (&http.Client{Timeout: limit}).Post("http://"+proxy+"/upload", "text/plain", strings.NewReader(strings.Repeat("x", 1000)))
	wantUpstream(t, "an upload among the slow ones", resp, err)
	r := <-done
	if r.open > 0 {
		t.Errorf("%d of %d trickled uploads still open after %s; want them closed after the 1 s grace", r.open, n, limit)
	}
	for _, a := range r.answers {
		if !strings.HasPrefix(a, "HTTP/1.1 408") {
			t.Errorf("a trickled upload was answered %q, want 408", firstLine(a))
			break
		}
	}
}

// TestBenchReachesAProtectedServe: sluice bench, over HTTP and gRPC,
// decides calls on a serve with --data-token and mutual TLS when given
// the token, the CA and a client certificate; without the token every
// call fails.
func TestBenchReachesAProtectedServe(t *testing.T) {
	dir := t.TempDir()
	ca, clients := listentest.NewCA(t, "server CA"), listentest.NewCA(t, "client CA")
	cert, key := ca.Server(t).Files(t, dir, "data")
	clientCert, clientKey := clients.Client(t, "bench").Files(t, dir, "bench")
	rules := writeFile(t, dir, "rules.yaml", perUser)
	data, grpcAddr, admin := listentest.FreeAddr(t), listentest.FreeAddr(t), listentest.FreeAddr(t)
	s := start(t, "serve", "--rules", rules, "--listen", data, "--grpc-listen", grpcAddr, "--admin-listen", admin,
		"--tls-cert", cert, "--tls-key", key, "--tls-client-ca", clients.File(t), "--data-token", "s3cret")
	s.waitUp(t, &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: ca.Pool(), Certificates: []tls.Certificate{clients.Client(t, "probe").TLS(t)}}}}, "https://"+data+"/healthz")

	creds := []string{"--data-ca", ca.File(t), "--data-client-cert", clientCert, "--data-client-key", clientKey}
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"http", []string{"--target", "https://" + data}},
		{"grpc", []string{"--grpc", "--target", grpcAddr}},
		{"grpc-go", []string{"--grpc", "--grpc-client", "grpc-go", "--target", grpcAddr}},
	} {
		args := append([]string{"bench", "--requests", "50", "--concurrency", "2", "--duration", "10s", "--json"}, tt.args...)
		args = append(args, creds...)
		code, out, stderr := sluice(t, "", append(args, "--data-token", "s3cret")...)
		if code != 0 || !strings.Contains(out, `"errors": 0`) || !strings.Contains(out, `"requests": 50`) {
			t.Errorf("%s: sluice bench with the token = %d, %s %s; want 50 calls, no error", tt.name, code, out, stderr)
		}
		if code, _, stderr := sluice(t, "", args...); code != 1 || !strings.Contains(stderr, "does not answer") {
			t.Errorf("%s: sluice bench without the token = %d, %s; want its first call refused", tt.name, code, stderr)
		}
	}
}

// TestServeRefusesBlankDataTokenFromEnv: SLUICE_DATA_TOKEN is checked as
// --data-token is.
func TestServeRefusesBlankDataTokenFromEnv(t *testing.T) {
	rules := writeFile(t, t.TempDir(), "rules.yaml", perUser)
	t.Setenv("SLUICE_DATA_TOKEN", " , ")
	code, _, stderr := sluice(t, "", "serve", "--rules", rules, "--listen", "127.0.0.1:0", "--grpc-listen", "", "--admin-listen", "127.0.0.1:0")
	if code != 1 || !strings.Contains(stderr, "--data-token") || !strings.Contains(stderr, "blank") {
		t.Errorf("serve with SLUICE_DATA_TOKEN=' , ' = %d, %q; want exit 1 naming --data-token as blank", code, stderr)
	}
}

// TestGatewayTLS: the gateway's proxy and its admin listener speak TLS
// with their own certificates; the proxy with a client CA refuses a client
// without a certificate.
func TestGatewayTLS(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "upstream") //nolint:errcheck
	}))
	defer up.Close()
	dir := t.TempDir()
	ca, clients := listentest.NewCA(t, "server CA"), listentest.NewCA(t, "client CA")
	cert, key := ca.Server(t).Files(t, dir, "proxy")
	adminCert, adminKey := ca.Server(t).Files(t, dir, "admin")
	rules := writeFile(t, dir, "rules.yaml", perUser)
	proxy, admin := listentest.FreeAddr(t), listentest.FreeAddr(t)
	s := start(t, "gateway", "--upstream", up.URL, "--rules", rules, "--listen", proxy, "--admin-listen", admin,
		"--tls-cert", cert, "--tls-key", key, "--tls-client-ca", clients.File(t),
		"--admin-tls-cert", adminCert, "--admin-tls-key", adminKey)
	trusting := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	s.waitUp(t, trusting, "https://"+admin+"/healthz")

	withCert := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: ca.Pool(), Certificates: []tls.Certificate{clients.Client(t, "app").TLS(t)}}}}
	resp, err := withCert.Get("https://" + proxy + "/api")
	wantUpstream(t, "GET through the TLS proxy", resp, err)
	if resp, err := trusting.Get("https://" + proxy + "/api"); err == nil {
		resp.Body.Close()
		t.Errorf("a client without a certificate got %d through the proxy, want the handshake refused", resp.StatusCode)
	}
	if resp, err := trusting.Get("https://" + admin + "/rules"); err != nil || resp.StatusCode != 200 {
		t.Errorf("GET /rules on the TLS admin listener = %v, %v; want 200", resp, err)
	} else {
		resp.Body.Close()
	}
}

// wantUpstream fails the test unless the call named what got the
// upstream's answer: 200 "upstream".
func wantUpstream(t *testing.T, what string, resp *http.Response, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "upstream" {
		t.Errorf("%s = %d %q, want 200 from the upstream", what, resp.StatusCode, b)
	}
}
