package listen_test

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/listen"
	"github.com/sluicehq/sluice/internal/testkit/listentest"
)

func TestParseTokens(t *testing.T) {
	for _, tt := range []struct {
		in      string
		set     bool
		wantErr string // "" when valid
	}{
		{"", false, ""},
		{"a", true, ""},
		{"old,new", true, ""},
		{" old , new ", true, ""},
		{" ", false, "entry 1 is blank"},
		{",", false, "entry 1 is blank"},
		{" , ", false, "entry 1 is blank"},
		{"a,", false, "entry 2 is blank"},
		{"a,,b", false, "entry 2 is blank"},
		{"a b", false, "entry 1 holds a space"},
		{"a\tb,c", false, "entry 1 holds a space or control character"},
	} {
		tok, err := listen.ParseTokens("--data-token", tt.in)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("ParseTokens(%q) = %v, want no error", tt.in, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "--data-token")):
			t.Errorf("ParseTokens(%q) = %v, want an error naming --data-token and containing %q", tt.in, err, tt.wantErr)
		case err == nil && tok.Set() != tt.set:
			t.Errorf("ParseTokens(%q).Set() = %v, want %v", tt.in, tok.Set(), tt.set)
		}
	}
}

func TestTokensValid(t *testing.T) {
	tok, err := listen.ParseTokens("--data-token", "old-secret,new-secret")
	if err != nil {
		t.Fatal(err)
	}
	for h, want := range map[string]bool{
		"Bearer old-secret":   true,
		"Bearer new-secret":   true,
		"bearer  new-secret ": true,
		"Bearer old-secre":    false,
		"Bearer old-secretx":  false,
		"Bearer ":             false,
		"Bearer":              false,
		"Basic old-secret":    false,
		"old-secret":          false,
		"":                    false,
	} {
		if got := tok.Valid(h); got != want {
			t.Errorf("Valid(%q) = %v, want %v", h, got, want)
		}
	}
	if (listen.Tokens{}).Valid("Bearer x") {
		t.Error("the zero Tokens accepted a token; it has none to match")
	}
}

// serve serves h on a loopback listener with the limits, with TLS when t
// is not nil, until the test ends; it returns the address.
func serve(t *testing.T, h http.Handler, l listen.Limits, streaming bool, tl *listen.TLS) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if tl != nil {
		ln = tls.NewListener(ln, tl.Config())
	}
	s := l.Server(h, streaming, nil)
	go s.Serve(ln) //nolint:errcheck // ends with Close
	t.Cleanup(func() { s.Close() })
	return ln.Addr().String()
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body) //nolint:errcheck
	io.WriteString(w, "ok")     //nolint:errcheck
})

func TestTokensHTTP(t *testing.T) {
	tok, err := listen.ParseTokens("--data-token", "old-secret,new-secret")
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, tok.HTTP(ok, "/healthz"), listen.Limits{}, false, nil)
	for _, tt := range []struct {
		path, auth string
		want       int
	}{
		{"/check", "", 401},
		{"/check", "Bearer wrong", 401},
		{"/check", "Bearer old-secret", 200},
		{"/check", "Bearer new-secret", 200},
		{"/healthz", "", 200},
		{"/healthz/", "", 401},
	} {
		req, _ := http.NewRequest("POST", "http://"+addr+tt.path, strings.NewReader("{}"))
		if tt.auth != "" {
			req.Header.Set("Authorization", tt.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("POST %s with Authorization %q = %d %s, want %d", tt.path, tt.auth, resp.StatusCode, b, tt.want)
		}
		if resp.StatusCode == 401 && (resp.Header.Get("WWW-Authenticate") != "Bearer" || !strings.Contains(string(b), "--data-token")) {
			t.Errorf("401 = %q, WWW-Authenticate %q; want a body naming --data-token and WWW-Authenticate: Bearer", b, resp.Header.Get("WWW-Authenticate"))
		}
	}
}

// tlsClient returns a client that trusts ca's certificates, presenting
// cert when given, on a new connection every call.
func tlsClient(ca *listentest.CA, cert *tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: ca.Pool()}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
}

// servedSerial returns the serial number of the certificate addr serves.
func servedSerial(t *testing.T, c *http.Client, addr string) string {
	t.Helper()
	resp, err := c.Get("https://" + addr + "/")
	if err != nil {
		t.Fatalf("GET https://%s: %v", addr, err)
	}
	io.Copy(io.Discard, resp.Body) //nolint:errcheck
	resp.Body.Close()
	return resp.TLS.PeerCertificates[0].SerialNumber.String()
}

// TestTLSReload: a certificate replaced on disk is served from the next
// handshake on, without a restart; a replacement that does not load (a
// new certificate whose key has not been written yet) leaves the last
// good one in force until it is fixed.
func TestTLSReload(t *testing.T) {
	ca := listentest.NewCA(t, "test CA")
	dir := t.TempDir()
	first := ca.Server(t)
	cert, key := first.Files(t, dir, "server")
	tl, err := listen.NewTLS(listen.TLSFiles{Cert: cert, Key: key}, []string{"http/1.1"}, "--tls", nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, ok, listen.Limits{}, false, tl)
	c := tlsClient(ca, nil)
	if got, want := servedSerial(t, c, addr), first.Cert.SerialNumber.String(); got != want {
		t.Fatalf("served certificate %s, want %s", got, want)
	}

	second := ca.Server(t)
	second.WriteTo(t, cert, key)
	if got, want := servedSerial(t, c, addr), second.Cert.SerialNumber.String(); got != want {
		t.Fatalf("after replacing the files, served certificate %s, want the new %s", got, want)
	}

	// Half a renewal: a new certificate, the old key.
	third := ca.Server(t)
	if err := os.WriteFile(cert, third.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := servedSerial(t, c, addr), second.Cert.SerialNumber.String(); got != want {
		t.Fatalf("with a certificate that does not match its key, served %s, want the last good %s", got, want)
	}
	if err := os.WriteFile(key, third.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := servedSerial(t, c, addr), third.Cert.SerialNumber.String(); got != want {
		t.Fatalf("once the key followed, served %s, want %s", got, want)
	}
}

// mutualTLS writes a server certificate of ca and the certificate of
// clients, the client CA, to a folder, and returns the --tls listener for
// protos that asks for a client certificate clients signed, and the client
// CA's file.
func mutualTLS(t *testing.T, ca, clients *listentest.CA, protos ...string) (*listen.TLS, string) {
	t.Helper()
	dir := t.TempDir()
	cert, key := ca.Server(t).Files(t, dir, "server")
	caFile := filepath.Join(dir, "clients.pem")
	if err := os.WriteFile(caFile, clients.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	tl, err := listen.NewTLS(listen.TLSFiles{Cert: cert, Key: key, ClientCA: caFile}, protos, "--tls", nil)
	if err != nil {
		t.Fatal(err)
	}
	return tl, caFile
}

// TestMutualTLS: with a client CA, a client without a certificate, or
// with one another CA signed, is refused; one the CA signed is served.
// Replacing the client CA file changes whom it accepts without a restart.
func TestMutualTLS(t *testing.T) {
	ca, other := listentest.NewCA(t, "server CA"), listentest.NewCA(t, "other CA")
	clients := listentest.NewCA(t, "client CA")
	tl, caFile := mutualTLS(t, ca, clients, "http/1.1")
	addr := serve(t, ok, listen.Limits{}, false, tl)

	get := func(c *http.Client) error {
		resp, err := c.Get("https://" + addr + "/")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.ReadAll(resp.Body); err != nil {
			return err
		}
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	good := clients.Client(t, "envoy").TLS(t)
	strange := other.Client(t, "mallory").TLS(t)
	if err := get(tlsClient(ca, nil)); err == nil {
		t.Error("a client without a certificate was served; mutual TLS must refuse it")
	}
	if err := get(tlsClient(ca, &strange)); err == nil {
		t.Error("a client whose certificate another CA signed was served")
	}
	if err := get(tlsClient(ca, &good)); err != nil {
		t.Errorf("a client with a certificate of the client CA: %v, want served", err)
	}

	// The client CA rotated: now only other's clients get in.
	if err := os.WriteFile(caFile, other.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := get(tlsClient(ca, &strange)); err != nil {
		t.Errorf("after the client CA file named the other CA, its client: %v, want served", err)
	}
	if err := get(tlsClient(ca, &good)); err == nil {
		t.Error("after the client CA file was replaced, a client of the old CA was still served")
	}
}

func TestNewTLSErrors(t *testing.T) {
	ca := listentest.NewCA(t, "ca")
	dir := t.TempDir()
	cert, key := ca.Server(t).Files(t, dir, "server")
	if tl, err := listen.NewTLS(listen.TLSFiles{}, nil, "--tls", nil); tl != nil || err != nil {
		t.Errorf("NewTLS(no files) = %v, %v; want nil, nil (plain TCP)", tl, err)
	}
	for _, tt := range []struct {
		files listen.TLSFiles
		want  string
	}{
		{listen.TLSFiles{Cert: cert}, "--admin-tls-cert needs --admin-tls-key"},
		{listen.TLSFiles{Key: key}, "--admin-tls-key needs --admin-tls-cert"},
		{listen.TLSFiles{ClientCA: cert}, "--admin-tls-client-ca needs --admin-tls-cert and --admin-tls-key"},
		{listen.TLSFiles{Cert: key, Key: cert}, "--admin-tls-cert"},
		{listen.TLSFiles{Cert: cert, Key: key, ClientCA: key}, "no PEM certificate"},
		{listen.TLSFiles{Cert: cert, Key: filepath.Join(dir, "missing")}, "no such file"},
	} {
		if _, err := listen.NewTLS(tt.files, nil, "--admin-tls", nil); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewTLS(%+v) = %v, want an error containing %q", tt.files, err, tt.want)
		}
	}
}

// TestMinBodyRate: a body trickled below the rate fails once the grace has
// passed and its connection is closed; a body the handler is slow to read
// (a slow upstream) is not the client's fault and passes; a body nobody
// reads is drained for the grace at most.
func TestMinBodyRate(t *testing.T) {
	const rate, grace = 1000, 300 * time.Millisecond
	var mu sync.Mutex
	var errs []error
	h := listen.MinBodyRate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/deny" {
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		if r.URL.Path == "/slow-reader" {
			time.Sleep(2 * grace) // the upstream takes its time
		}
		_, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
			w.WriteHeader(http.StatusRequestTimeout)
			return
		}
		io.WriteString(w, "ok") //nolint:errcheck
	}), rate, grace)
	addr := serve(t, h, listen.Limits{}, true, nil)

	start := time.Now()
	slow := listentest.Trickle(t, addr, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n", 100, 50*time.Millisecond, 10*time.Second)
	denied := listentest.Trickle(t, addr, "POST /deny HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nx", 0, 0, 10*time.Second)
	for name, ch := range map[string]<-chan listentest.Trickled{"trickled body": slow, "unread body of a denied call": denied} {
		if (<-ch).Open {
			t.Errorf("%s: the connection was still open after 10 s; want it closed after the %s grace", name, grace)
		}
	}
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("the slow connections took %s to close, want about the %s grace", took, grace)
	}
	mu.Lock()
	if len(errs) != 1 || !errors.Is(errs[0], listen.ErrSlowBody) {
		t.Errorf("the handler's read errors = %v, want one ErrSlowBody", errs)
	}
	mu.Unlock()

	body := strings.Repeat("x", 10_000)
	for _, path := range []string{"/fast", "/slow-reader"} {
		resp, err := http.Post("http://"+addr+path, "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("POST %s of a body sent at once = %d %s, want 200", path, resp.StatusCode, b)
		}
	}
}

// TestSlowHeadersAndIdle: a client that never finishes its headers, or
// keeps a connection idle, is cut off after ReadHeaderTimeout or
// IdleTimeout; headers over MaxHeaderBytes get 431.
func TestSlowHeadersAndIdle(t *testing.T) {
	l := listen.Limits{ReadHeaderTimeout: 300 * time.Millisecond, BodyTimeout: time.Second, IdleTimeout: 300 * time.Millisecond, MaxHeaderBytes: 4096}
	addr := serve(t, ok, l, false, nil)

	closedWithin := func(name string, c net.Conn) {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck
		start := time.Now()
		_, err := io.ReadAll(c)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s: the connection was still open after 10 s", name)
		} else {
			t.Logf("%s: closed after %s", name, time.Since(start).Round(time.Millisecond))
		}
		c.Close()
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\n") //nolint:errcheck // and no more
	closedWithin("headers never finished", c)

	c, err = net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n") //nolint:errcheck
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET: %v, %v", resp, err)
	}
	resp.Body.Close()
	closedWithin("idle after a request", c)

	req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
	req.Header.Set("X-Big", strings.Repeat("x", 4096+4096+1))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("headers over MaxHeaderBytes = %d, want 431", resp.StatusCode)
	}
}

// BenchmarkTokensValid: what --data-token adds to a decision.
func BenchmarkTokensValid(b *testing.B) {
	tok, err := listen.ParseTokens("--data-token", "old-secret-0123456789abcdef0123456789abcdef,new-secret-0123456789abcdef0123456789abcdef")
	if err != nil {
		b.Fatal(err)
	}
	h := "Bearer new-secret-0123456789abcdef0123456789abcdef"
	b.ReportAllocs()
	for b.Loop() {
		if !tok.Valid(h) {
			b.Fatal("refused")
		}
	}
}
