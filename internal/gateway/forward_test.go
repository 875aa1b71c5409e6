package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/gateway"
	"github.com/sluicehq/sluice/internal/testkit/listentest"
)

// countingUpstream is an upstream that counts the connections it accepted.
type countingUpstream struct {
	*httptest.Server
	conns atomic.Int64
}

func newCountingUpstream(t *testing.T, h http.HandlerFunc) *countingUpstream {
	t.Helper()
	u := &countingUpstream{Server: httptest.NewUnstartedServer(h)}
	u.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			u.conns.Add(1)
		}
	}
	u.Start()
	t.Cleanup(u.Close)
	return u
}

// do sends req with a client of its own (one keep-alive connection) and
// returns the answer with its body read.
func do(t *testing.T, c *http.Client, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", req.Method, req.URL, err)
	}
	return resp, string(b)
}

func newReq(t *testing.T, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// onlyReader hides a reader's type, so that the client cannot tell its
// length and sends it chunked.
type onlyReader struct{ io.Reader }

func TestForwardRequestBodies(t *testing.T) {
	type seen struct {
		body, te string
		length   int64
	}
	got := make(chan seen, 1)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{string(b), strings.Join(r.TransferEncoding, ","), r.ContentLength}
		io.WriteString(w, "ok")
	})
	gw := newGateway(t, newLimiter(t, noRules), up.URL, nil)
	big := strings.Repeat("0123456789abcdef", 20000) // 320 KB: more than one buffer
	tests := []struct {
		name, method string
		body         io.Reader
		want         seen
	}{
		{"content-length", "POST", strings.NewReader("hello"), seen{"hello", "", 5}},
		{"large content-length", "PUT", strings.NewReader(big), seen{big, "", int64(len(big))}},
		{"chunked", "POST", onlyReader{strings.NewReader("streamed body")}, seen{"streamed body", "chunked", -1}},
		{"large chunked", "POST", onlyReader{strings.NewReader(big)}, seen{big, "chunked", -1}},
		{"empty POST", "POST", nil, seen{"", "", 0}},
		{"GET", "GET", nil, seen{"", "", 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := do(t, http.DefaultClient, newReq(t, tt.method, gw.URL+"/x", tt.body))
			if resp.StatusCode != 200 || body != "ok" {
				t.Fatalf("%s = %d %q, want 200 ok", tt.method, resp.StatusCode, body)
			}
			s := <-got
			if s.body != tt.want.body || s.te != tt.want.te || s.length != tt.want.length {
				t.Errorf("upstream saw body of %d bytes, Transfer-Encoding %q, Content-Length %d; want %d bytes, %q, %d",
					len(s.body), s.te, s.length, len(tt.want.body), tt.want.te, tt.want.length)
			}
		})
	}
}

// TestForwardAnswersWithoutBody: HEAD, 204 and 304 answers carry no body,
// keep the upstream's headers, and leave the connection usable.
func TestForwardAnswersWithoutBody(t *testing.T) {
	up := newCountingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/204":
			w.WriteHeader(204)
		case "/304":
			w.Header().Set("ETag", `"v1"`)
			w.WriteHeader(304)
		default:
			w.Header().Set("Content-Length", "11")
			io.WriteString(w, "hello world")
		}
	})
	gw := newGateway(t, newLimiter(t, noRules), up.URL, nil)
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer c.CloseIdleConnections()
	for _, tt := range []struct {
		method, path string
		status       int
		header, val  string
		body         string
	}{
		{"HEAD", "/doc", 200, "Content-Length", "11", ""},
		{"GET", "/204", 204, "", "", ""},
		{"GET", "/304", 304, "Etag", `"v1"`, ""},
		{"GET", "/doc", 200, "Content-Length", "11", "hello world"},
		{"HEAD", "/doc", 200, "Content-Length", "11", ""},
	} {
		resp, body := do(t, c, newReq(t, tt.method, gw.URL+tt.path, nil))
		if resp.StatusCode != tt.status || body != tt.body || (tt.header != "" && resp.Header.Get(tt.header) != tt.val) {
			t.Errorf("%s %s = %d %q %s=%q, want %d %q %q", tt.method, tt.path, resp.StatusCode, body, tt.header, resp.Header.Get(tt.header), tt.status, tt.body, tt.val)
		}
	}
	if n := up.conns.Load(); n != 1 {
		t.Errorf("the upstream accepted %d connections for 5 calls in turn, want 1", n)
	}
}

// TestForwardStreams: an answer of unknown length reaches the client as it
// is written, not when it ends.
func TestForwardStreams(t *testing.T) {
	release := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
		io.WriteString(w, "second\n")
	})
	gw := newGateway(t, newLimiter(t, noRules), up.URL, nil)
	resp, err := http.Get(gw.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "first\n" {
		t.Fatalf("first line = %q, %v; want %q before the upstream ends its answer", line, err, "first\n")
	}
	close(release)
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "second\n" {
		t.Errorf("rest = %q, %v; want %q", rest, err, "second\n")
	}
}

// TestForwardHopByHopInAnswers: the upstream's hop-by-hop headers, and
// those its Connection header names, are not passed on; its
// "Connection: close" closes its own connection, not the client's.
func TestForwardHopByHopInAnswers(t *testing.T) {
	up := newCountingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// (A Connection header that says close is read, and dropped, by
		// http.ReadResponse: it names no further header.)
		h.Set("Connection", "X-Internal")
		h.Set("X-Internal", "secret")
		if r.URL.Path == "/close" {
			h.Set("Connection", "close")
			h.Del("X-Internal")
		}
		h.Set("Keep-Alive", "timeout=5")
		h.Set("Proxy-Authenticate", "Basic")
		h.Set("X-Kept", "k")
		io.WriteString(w, "ok")
	})
	gw := newGateway(t, newLimiter(t, noRules), up.URL, nil)
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer c.CloseIdleConnections()
	for i := range 4 {
		resp, body := do(t, c, newReq(t, "GET", gw.URL+[]string{"/close", "/x"}[i%2], nil))
		if resp.StatusCode != 200 || body != "ok" || resp.Close {
			t.Fatalf("call %d: %d %q close=%v, want 200 ok on a kept connection", i, resp.StatusCode, body, resp.Close)
		}
		for _, k := range []string{"X-Internal", "Keep-Alive", "Proxy-Authenticate"} {
			if v := resp.Header.Get(k); v != "" {
				t.Errorf("the client saw %s: %q", k, v)
			}
		}
		if resp.Header.Get("X-Kept") != "k" {
			t.Errorf("X-Kept = %q, want k", resp.Header.Get("X-Kept"))
		}
	}
	// /close closes the first, /x opens the second, /close closes it, /x
	// opens the third.
	if n := up.conns.Load(); n != 3 {
		t.Errorf("the upstream accepted %d connections for /close, /x, /close, /x, want 3", n)
	}
}

// TestForwardTeTrailers: "TE: trailers" is passed on (gRPC needs it); any
// other TE is not.
func TestForwardTeTrailers(t *testing.T) {
	up := newUpstream(t, nil)
	gw := newGateway(t, newLimiter(t, noRules), up.URL, nil)
	for _, tt := range []struct{ in, want string }{{"trailers", "trailers"}, {"gzip", ""}, {"gzip, trailers", "trailers"}} {
		get(t, gw.URL+"/x", map[string]string{"Te": tt.in})
		if got := up.lastHeader().Get("Te"); got != tt.want {
			t.Errorf("TE %q: upstream saw %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestForwardTrailers: the upstream's trailers, announced or not, reach
// the client.
func TestForwardTrailers(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Checksum")
		io.WriteString(w, "body")
		w.Header().Set("X-Checksum", "abc")
		w.Header().Set(http.TrailerPrefix+"X-Late", "late")
	})
	gw := newGateway(t, newLimiter(t, noRules), up.URL, nil)
	resp, body := get(t, gw.URL+"/x", nil)
	if resp.StatusCode != 200 || body != "body" {
		t.Fatalf("GET = %d %q", resp.StatusCode, body)
	}
	if resp.Trailer.Get("X-Checksum") != "abc" || resp.Trailer.Get("X-Late") != "late" {
		t.Errorf("trailers = %v, want X-Checksum: abc and X-Late: late", resp.Trailer)
	}
}

// TestForwardReusesConnections: calls in turn share one upstream
// connection, and an upstream that closed an idle connection is not a
// failure for the next call, with or without a body.
func TestForwardReusesConnections(t *testing.T) {
	t.Run("kept", func(t *testing.T) {
		up := newCountingUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body); io.WriteString(w, "ok") })
		gw := newGateway(t, newLimiter(t, noRules), up.URL, nil)
		for i := range 20 {
			method, body := "GET", io.Reader(nil)
			if i%2 == 1 {
				method, body = "POST", strings.NewReader("data")
			}
			if resp, b := do(t, http.DefaultClient, newReq(t, method, gw.URL+"/x", body)); resp.StatusCode != 200 || b != "ok" {
				t.Fatalf("call %d: %d %q", i, resp.StatusCode, b)
			}
		}
		if n := up.conns.Load(); n != 1 {
			t.Errorf("the upstream accepted %d connections for 20 calls in turn, want 1", n)
		}
	})
	// A small answer is read from the buffer without clearing the
	// response deadline; a pooled connection whose deadline has since
	// passed is still reused, by a call that checks it first (a POST) and
	// by one that does not.
	t.Run("past its response deadline", func(t *testing.T) {
		up := newCountingUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body); io.WriteString(w, "ok") })
		gw := newGateway(t, newLimiter(t, noRules), up.URL, func(c *gateway.Config) { c.ResponseTimeout = 50 * time.Millisecond })
		for i, method := range []string{"GET", "POST", "GET", "GET"} {
			if resp, b := do(t, http.DefaultClient, newReq(t, method, gw.URL+"/x", nil)); resp.StatusCode != 200 || b != "ok" {
				t.Fatalf("call %d: %d %q", i, resp.StatusCode, b)
			}
			time.Sleep(120 * time.Millisecond)
		}
		if n := up.conns.Load(); n != 1 {
			t.Errorf("the upstream accepted %d connections for 4 calls in turn, want 1", n)
		}
	})
	// The upstream closes each connection once it has answered, without
	// saying so: the next call finds the pooled connection closed. A call
	// without a body that may be repeated (RFC 9110 section 9.2.2) is sent
	// again on a new connection; any other call checks the connection is
	// open before it is sent.
	for _, tt := range []struct {
		method string
		body   bool
		key    string
	}{{"GET", false, ""}, {"DELETE", false, ""}, {"POST", true, ""}, {"POST", false, ""}, {"PATCH", false, "k1"}} {
		t.Run("closed by the upstream/"+tt.method, func(t *testing.T) {
			closed := make(chan struct{}, 1)
			up := newCountingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Length", "2")
				io.WriteString(w, "ok")
				w.(http.Flusher).Flush()
				if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
					c.Close()
				}
				closed <- struct{}{}
			})
			gw := newGateway(t, newLimiter(t, noRules), up.URL, nil)
			for i := range 5 {
				var body io.Reader
				if tt.body {
					body = strings.NewReader("data")
				}
				req := newReq(t, tt.method, gw.URL+"/x", body)
				if tt.key != "" {
					req.Header.Set("Idempotency-Key", tt.key)
				}
				if resp, b := do(t, http.DefaultClient, req); resp.StatusCode != 200 || b != "ok" {
					t.Fatalf("call %d: %d %q, want 200 ok", i, resp.StatusCode, b)
				}
				<-closed
			}
		})
	}
}

// rawUpstream answers every connection with reply and closes it.
func rawUpstream(t *testing.T, reply string) string {
	t.Helper()
	return "http://" + listentest.ServeTCP(t, func(c net.Conn) {
		defer c.Close()
		br := bufio.NewReader(c)
		for { // the request's head
			l, err := br.ReadString('\n')
			if err != nil || l == "\r\n" {
				break
			}
		}
		io.WriteString(c, reply)
	})
}

func TestForwardBrokenAnswers(t *testing.T) {
	l := newLimiter(t, noRules)
	t.Run("close-delimited body", func(t *testing.T) {
		gw := newGateway(t, l, rawUpstream(t, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end"), nil)
		if resp, body := get(t, gw.URL+"/x", nil); resp.StatusCode != 200 || body != "until the end" {
			t.Errorf("GET = %d %q, want 200 %q", resp.StatusCode, body, "until the end")
		}
	})
	for _, tt := range []struct{ name, reply string }{
		{"not HTTP", "SSH-2.0-OpenSSH\r\n\r\n"},
		{"closed at once", ""},
		{"headers cut off", "HTTP/1.1 200 OK\r\nContent-Len"},
		{"switching protocols unasked", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			gw := newGateway(t, l, rawUpstream(t, tt.reply), nil)
			resp, body := get(t, gw.URL+"/x", nil)
			if resp.StatusCode != 502 || !strings.Contains(body, gateway.CodeBadGateway) {
				t.Errorf("GET = %d %q, want 502 %s", resp.StatusCode, body, gateway.CodeBadGateway)
			}
		})
	}
	// An answer cut off in its body ends the client's answer with an error
	// too, never one that looks whole.
	for _, tt := range []struct{ name, reply string }{
		{"body cut off", "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this"},
		{"chunked body cut off", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nsome\r\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			gw := newGateway(t, l, rawUpstream(t, tt.reply), nil)
			resp, err := http.Get(gw.URL + "/x")
			if err != nil {
				return // aborted before the headers went out: fine
			}
			defer resp.Body.Close()
			if b, err := io.ReadAll(resp.Body); err == nil {
				t.Errorf("reading the cut-off answer gave %q and no error, want an error (not an answer that looks whole)", b)
			}
		})
	}
}

// TestForwardClientGone: a client that goes away ends the call at the
// upstream too.
func TestForwardClientGone(t *testing.T) {
	started, ended := make(chan struct{}), make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-r.Context().Done():
			close(ended)
		case <-time.After(10 * time.Second):
		}
	})
	gw := newGateway(t, newLimiter(t, noRules), up.URL, nil)
	ctx, cancel := context.WithCancel(context.Background())
	req := newReq(t, "GET", gw.URL+"/x", nil).WithContext(ctx)
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-started
	cancel()
	<-errc
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Error("the upstream's call was still going 5 s after the client went away")
	}
}

// TestForwardUpgrade: an upgrade (WebSocket) goes through, over the
// ReverseProxy path.
func TestForwardUpgrade(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "no upgrade", 400)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		line, _ := brw.ReadString('\n')
		io.WriteString(c, "echo: "+line)
	})
	gw := newGateway(t, newLimiter(t, noRules), up.URL, nil)
	c, err := net.Dial("tcp", strings.TrimPrefix(gw.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade answer: %v %v, want 101", resp, err)
	}
	io.WriteString(c, "ping\n")
	if line, err := br.ReadString('\n'); err != nil || line != "echo: ping\n" {
		t.Errorf("over the upgraded connection: %q %v, want %q", line, err, "echo: ping\n")
	}
}

// TestForwardExpectContinue: a call with "Expect: 100-continue" gets its
// body to the upstream, over the ReverseProxy path.
func TestForwardExpectContinue(t *testing.T) {
	got := make(chan string, 1)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- string(b)
		io.WriteString(w, "ok")
	})
	gw := newGateway(t, newLimiter(t, noRules), up.URL, nil)
	c := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: 5 * time.Second}}
	defer c.CloseIdleConnections()
	req := newReq(t, "PUT", gw.URL+"/x", strings.NewReader("payload"))
	req.Header.Set("Expect", "100-continue")
	if resp, body := do(t, c, req); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("PUT = %d %q, want 200 ok", resp.StatusCode, body)
	}
	if b := <-got; b != "payload" {
		t.Errorf("upstream read %q, want payload", b)
	}
}

// TestForwardPlainAnswers: answers read by the forwarder's own parser or
// by net/http's alike — a large body, headers that arrive in two pieces,
// and Connection: close — reach the client whole, and the upstream
// connection is reused exactly when it may be.
func TestForwardPlainAnswers(t *testing.T) {
	l := newLimiter(t, noRules)
	large := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	for _, tt := range []struct {
		name      string
		h         http.HandlerFunc
		want      string
		wantConns int64
	}{
		{"large body", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", fmt.Sprint(len(large)))
			io.WriteString(w, large)
		}, large, 1},
		{"headers in two pieces", func(w http.ResponseWriter, r *http.Request) {
			c, bw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			bw.Flush()
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/pl")
			time.Sleep(20 * time.Millisecond)
			io.WriteString(c, "ain\r\nContent-Length: 5\r\nConnection: close\r\n\r\nsplit")
		}, "split", 3},
		{"many headers", func(w http.ResponseWriter, r *http.Request) {
			for i := range 40 {
				w.Header().Add(fmt.Sprintf("X-H%d", i%25), fmt.Sprint(i))
			}
			io.WriteString(w, "many")
		}, "many", 1},
		{"connection close", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "close")
			io.WriteString(w, "bye")
		}, "bye", 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up := newCountingUpstream(t, tt.h)
			gw := newGateway(t, l, up.URL, nil)
			for i := range 3 {
				resp, body := do(t, http.DefaultClient, newReq(t, "GET", gw.URL+"/x", nil))
				if resp.StatusCode != 200 || body != tt.want {
					t.Fatalf("call %d: %d, %d bytes, want 200, %d bytes", i, resp.StatusCode, len(body), len(tt.want))
				}
				if c := resp.Header.Get("Content-Type"); tt.name == "headers in two pieces" && c != "text/plain" {
					t.Errorf("call %d: Content-Type %q, want text/plain", i, c)
				}
				if tt.name == "many headers" {
					for j := range 25 {
						want := fmt.Sprint(j)
						if j < 15 {
							want += "," + fmt.Sprint(j+25)
						}
						if got := strings.Join(resp.Header.Values(fmt.Sprintf("X-H%d", j)), ","); got != want {
							t.Errorf("call %d: X-H%d %q, want %q", i, j, got, want)
						}
					}
				}
			}
			if n := up.conns.Load(); n != tt.wantConns {
				t.Errorf("the upstream accepted %d connections for 3 calls in turn, want %d", n, tt.wantConns)
			}
		})
	}
}

// TestForwardConcurrentAnswersStayApart: calls in flight at once over
// pooled upstream connections each get their own answer's headers and
// body (the forwarder uses its call states and header maps again).
func TestForwardConcurrentAnswersStayApart(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("id")
		w.Header().Set("X-Echo", id)
		w.Header().Set("X-Echo-"+id, id)
		io.WriteString(w, "body "+id)
	})
	gw := newGateway(t, newLimiter(t, noRules), up.URL, nil)
	tr := &http.Transport{MaxIdleConnsPerHost: 8}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	errc := make(chan error, 8)
	for g := range 8 {
		go func() {
			for i := range 50 {
				id := fmt.Sprintf("%d-%d", g, i)
				resp, err := client.Get(gw.URL + "/x?id=" + id)
				if err != nil {
					errc <- err
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || string(b) != "body "+id || resp.Header.Get("X-Echo") != id || resp.Header.Get("X-Echo-"+id) != id || len(resp.Header) > 8 {
					errc <- fmt.Errorf("call %s: %q %v, headers %v", id, b, err, resp.Header)
					return
				}
			}
			errc <- nil
		}()
	}
	for range 8 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}
