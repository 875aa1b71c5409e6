package http1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// dumpHandler answers every request with a dump of what the server made
// of it: method, target, Host, headers, framing and the body read.
func dumpHandler(fast *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := w.(*respWriter); ok && fast != nil {
			fast.Add(1)
		}
		body, err := io.ReadAll(r.Body)
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s %q %s host=%q cl=%d te=%q close=%v\n", r.Method, r.RequestURI, r.URL.String(), r.Proto, r.Host, r.ContentLength, r.TransferEncoding, r.Close)
		keys := make([]string, 0, len(r.Header))
		for k := range r.Header {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "%s=%q\n", k, r.Header[k])
		}
		fmt.Fprintf(&b, "body=%q err=%v\n", body, err != nil)
		w.Header().Set("X-Test", "1")
		io.WriteString(w, b.String())
	})
}

// startServers starts the gateway's server loop (with net/http as its
// fallback) and a bare net/http server, both running h.
func startServers(t *testing.T, h http.Handler) (loopAddr, stdAddr string) {
	t.Helper()
	newHTTP := func() *http.Server {
		return &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 30 * time.Second, MaxHeaderBytes: 1 << 10}
	}
	ln1, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	loop := &Server{Handler: h, Fallback: newHTTP()}
	std := newHTTP()
	go loop.Serve(ln1)
	go std.Serve(ln2)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		loop.Shutdown(ctx)
		std.Shutdown(ctx)
	})
	return ln1.Addr().String(), ln2.Addr().String()
}

// send dials addr, sets a deadline 3 s away on the connection and writes
// raw; the error is the write's.
func send(t *testing.T, addr, raw string) (net.Conn, error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(3 * time.Second))
	_, err = io.WriteString(c, raw)
	return c, err
}

// exchange sends raw, then a last request that closes the connection,
// and returns every answer read, Date left out: how the server framed
// raw shows in what it answered to and in where the last request begins.
func exchange(t *testing.T, addr, raw string) string {
	t.Helper()
	c, err := send(t, addr, raw+"GET /last HTTP/1.1\r\nHost: end\r\nConnection: close\r\n\r\n")
	if err != nil {
		c.Close()
		return "write: " + err.Error()
	}
	defer c.Close()
	br := bufio.NewReader(c)
	var out strings.Builder
	for {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			if errors.Is(err, io.EOF) || isReset(err) {
				out.WriteString("EOF\n")
			} else {
				fmt.Fprintf(&out, "error: %v\n", err)
			}
			return out.String()
		}
		res.Header.Del("Date")
		b, _ := httputil.DumpResponse(res, true)
		out.Write(b)
		out.WriteString("\n----\n")
		if res.Close {
			return out.String()
		}
	}
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne)
}

// requestCases are requests the two servers must answer alike: plain
// ones the loop serves, and the framing attacks of request smuggling,
// which net/http must be left to judge.
var requestCases = map[string]string{
	"plain GET":              "GET /api/orders?x=1&y=%20 HTTP/1.1\r\nHost: a.example\r\nUser-Agent: t\r\nAccept: */*\r\n\r\n",
	"two values":             "GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\nx-a: 2\r\nX-B:   spaced  \t\r\n\r\n",
	"empty value":            "GET / HTTP/1.1\r\nHost: a\r\nX-Empty:\r\n\r\n",
	"content-length zero":    "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
	"connection close":       "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
	"connection keep-alive":  "GET / HTTP/1.1\r\nHost: a\r\nConnection: Keep-Alive\r\n\r\n",
	"pipelined":              "GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n",
	"body with length":       "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
	"chunked body":           "POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	"CL and TE":              "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n",
	"TE and CL":              "POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n",
	"CL 0 and TE":            "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
	"duplicate CL differing": "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\nhello",
	"duplicate CL same":      "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n",
	"CL list":                "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 0, 0\r\n\r\n",
	"CL plus sign":           "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: +0\r\n\r\n",
	"CL negative":            "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
	"CL hex":                 "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 0x5\r\n\r\nhello",
	"CL space inside":        "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 0 5\r\n\r\nhello",
	"TE identity":            "POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n",
	"TE gzip chunked":        "POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
	"TE chunked twice":       "POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"TE with space name":     "POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n",
	"TE obs-fold":            "POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n",
	"TE xchunked":            "POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n",
	"TE tab":                 "POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\tchunked\r\n\r\n0\r\n\r\n",
	"bad chunk size":         "POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
	"chunk size overflow":    "POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff1\r\nx\r\n0\r\n\r\n",
	"chunk bare LF":          "POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n",
	"chunk extension":        "POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\n\r\n",
	"obs-fold":               "GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n 2\r\n\r\n",
	"space before colon":     "GET / HTTP/1.1\r\nHost: a\r\nX-A : 1\r\n\r\n",
	"space in name":          "GET / HTTP/1.1\r\nHost: a\r\nX A: 1\r\n\r\n",
	"leading space line":     "GET / HTTP/1.1\r\n Host: a\r\n\r\n",
	"no colon":               "GET / HTTP/1.1\r\nHost: a\r\nX-A\r\n\r\n",
	"empty name":             "GET / HTTP/1.1\r\nHost: a\r\n: v\r\n\r\n",
	"bare LF lines":          "GET / HTTP/1.1\nHost: a\nX-A: 1\n\n",
	"bare LF one line":       "GET / HTTP/1.1\r\nHost: a\nX-A: 1\r\n\r\n",
	"bare CR":                "GET / HTTP/1.1\r\nHost: a\rX-A: 1\r\n\r\n",
	"NUL in value":           "GET / HTTP/1.1\r\nHost: a\r\nX-A: a\x00b\r\n\r\n",
	"DEL in value":           "GET / HTTP/1.1\r\nHost: a\r\nX-A: a\x7fb\r\n\r\n",
	"high byte in value":     "GET / HTTP/1.1\r\nHost: a\r\nX-A: caf\xc3\xa9\r\n\r\n",
	"no Host":                "GET / HTTP/1.1\r\nX-A: 1\r\n\r\n",
	"two Hosts":              "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
	"bad Host":               "GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
	"Host with slash":        "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n",
	"empty Host":             "GET / HTTP/1.1\r\nHost:\r\n\r\n",
	"HTTP/1.0":               "GET / HTTP/1.0\r\nHost: a\r\n\r\n",
	"HTTP/1.0 keep-alive":    "GET / HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n",
	"HTTP/2 preface":         "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
	"HTTP/9":                 "GET / HTTP/9.9\r\nHost: a\r\n\r\n",
	"lower-case version":     "GET / http/1.1\r\nHost: a\r\n\r\n",
	"absolute target":        "GET http://b.example/x HTTP/1.1\r\nHost: a\r\n\r\n",
	"asterisk target":        "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
	"fragment":               "GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n",
	"two spaces":             "GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
	"tab separator":          "GET\t/ HTTP/1.1\r\nHost: a\r\n\r\n",
	"lower-case method":      "get / HTTP/1.1\r\nHost: a\r\n\r\n",
	"HEAD":                   "HEAD / HTTP/1.1\r\nHost: a\r\n\r\n",
	"custom method":          "PURGE / HTTP/1.1\r\nHost: a\r\n\r\n",
	"CONNECT":                "CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n",
	"Expect 100-continue":    "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\nhello",
	"Expect other":           "GET / HTTP/1.1\r\nHost: a\r\nExpect: something\r\n\r\n",
	"Upgrade":                "GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
	"Pragma":                 "GET / HTTP/1.1\r\nHost: a\r\nPragma: no-cache\r\n\r\n",
	"Connection other":       "GET / HTTP/1.1\r\nHost: a\r\nConnection: close, X-A\r\nX-A: 1\r\n\r\n",
	"header too large":       "GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + strings.Repeat("b", 6000) + "\r\n\r\n",
	"cut short":              "GET / HTTP/1.1\r\nHost: a\r\nX-A: ",
	"control in target":      "GET /a\x01b HTTP/1.1\r\nHost: a\r\n\r\n",
	"escapes in target":      "GET /a%2Fb/%zz HTTP/1.1\r\nHost: a\r\n\r\n",
	"encoded space":          "GET /a%20b?q=%ZZ HTTP/1.1\r\nHost: a\r\n\r\n",
	"many, repeats":          "GET / HTTP/1.1\r\nHost: a\r\nX-H0: 0\r\nX-H1: 1\r\nX-H2: 2\r\nX-H3: 3\r\nX-H4: 4\r\nX-H5: 5\r\nX-H6: 6\r\nX-H7: 7\r\nX-H8: 8\r\nX-H9: 9\r\nX-H10: 10\r\nX-H11: 11\r\nX-H12: 12\r\nX-H13: 13\r\nX-H14: 14\r\nX-H15: 15\r\nX-H16: 16\r\nX-H17: 17\r\nX-H18: 18\r\nX-H19: 19\r\nX-H18: again\r\nX-H1: again\r\nx-h19: and again\r\n\r\n",
	"many, CL twice":         "POST /p HTTP/1.1\r\nHost: a\r\nX-H0: 0\r\nX-H1: 1\r\nX-H2: 2\r\nX-H3: 3\r\nX-H4: 4\r\nX-H5: 5\r\nX-H6: 6\r\nX-H7: 7\r\nX-H8: 8\r\nX-H9: 9\r\nX-H10: 10\r\nX-H11: 11\r\nX-H12: 12\r\nX-H13: 13\r\nX-H14: 14\r\nX-H15: 15\r\nX-H16: 16\r\nX-H17: 17\r\nX-H18: 18\r\nX-H19: 19\r\nContent-Length: 0\r\nX-A: 1\r\nContent-Length: 0\r\n\r\n",
	"many, Conn twice":       "GET / HTTP/1.1\r\nHost: a\r\nX-H0: 0\r\nX-H1: 1\r\nX-H2: 2\r\nX-H3: 3\r\nX-H4: 4\r\nX-H5: 5\r\nX-H6: 6\r\nX-H7: 7\r\nX-H8: 8\r\nX-H9: 9\r\nX-H10: 10\r\nX-H11: 11\r\nX-H12: 12\r\nX-H13: 13\r\nX-H14: 14\r\nX-H15: 15\r\nX-H16: 16\r\nX-H17: 17\r\nX-H18: 18\r\nX-H19: 19\r\nConnection: close\r\nConnection: close\r\n\r\n",
}

// TestServerAnswersAsNetHTTP sends every case to the loop and to a bare
// net/http server and wants the same answers: what net/http rejects the
// loop rejects, what it accepts reaches the handler as the same request.
func TestServerAnswersAsNetHTTP(t *testing.T) {
	var fast atomic.Int64
	loopAddr, stdAddr := startServers(t, dumpHandler(&fast))
	for name, raw := range requestCases {
		t.Run(name, func(t *testing.T) {
			got, want := exchange(t, loopAddr, raw), exchange(t, stdAddr, raw)
			if got != want {
				t.Errorf("the loop answered\n%s\nnet/http answered\n%s", got, want)
			}
		})
	}
	if fast.Load() == 0 {
		t.Error("the loop served no request itself")
	}
}

// TestServerServesPlainRequests checks that the plain requests are the
// loop's (and so the comparison above is of the loop, not of net/http
// against itself), and the others net/http's.
func TestServerServesPlainRequests(t *testing.T) {
	for _, tc := range []struct {
		name string
		fast bool
	}{
		{"plain GET", true}, {"two values", true}, {"empty value", true}, {"content-length zero", true},
		{"connection close", true}, {"connection keep-alive", true}, {"encoded space", true},
		{"body with length", false}, {"chunked body", false}, {"CL and TE", false}, {"obs-fold", false},
		{"many, repeats", true}, {"many, CL twice", false}, {"many, Conn twice", false},
		{"bare LF lines", false}, {"HTTP/1.0", false}, {"Upgrade", false}, {"HEAD", false}, {"header too large", false},
	} {
		raw := requestCases[tc.name]
		i := strings.Index(raw, "\r\n\r\n")
		var req http.Request
		if got := i >= 0 && len(raw[:i+4]) <= maxRequestHeader && parsePlain([]byte(raw[:i+4]), &req, nil, new([]string)); got != tc.fast {
			t.Errorf("%s: served by the loop = %v, want %v", tc.name, got, tc.fast)
		}
	}
}

// FuzzParsePlain: whatever request block the loop takes, net/http's
// parser takes too and makes the same request of it.
func FuzzParsePlain(f *testing.F) {
	for _, raw := range requestCases {
		if i := strings.Index(raw, "\r\n\r\n"); i >= 0 {
			f.Add([]byte(raw[:i+4]))
		}
	}
	f.Fuzz(func(t *testing.T, block []byte) {
		if !bytes.HasSuffix(block, []byte("\r\n\r\n")) {
			return
		}
		got := new(http.Request)
		if !parsePlain(block, got, nil, new([]string)) {
			return
		}
		want, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(block)))
		if err != nil {
			t.Fatalf("the loop took %q, net/http's parser refuses it: %v", block, err)
		}
		// http.ReadRequest moves Host to want.Host; the server's own
		// checks (one valid Host, valid names and values) are what the
		// table above compares against a running net/http server.
		if got.Method != want.Method || got.RequestURI != want.RequestURI || got.URL.String() != want.URL.String() ||
			got.Proto != want.Proto || got.Host != want.Host || got.ContentLength != want.ContentLength ||
			got.Close != want.Close || len(want.TransferEncoding) != 0 || fmt.Sprint(got.Header) != fmt.Sprint(want.Header) {
			t.Fatalf("%q:\nloop     %s %s %q %s host=%q cl=%d close=%v %v\nnet/http %s %s %q %s host=%q cl=%d close=%v %v", block,
				got.Method, got.RequestURI, got.URL, got.Proto, got.Host, got.ContentLength, got.Close, got.Header,
				want.Method, want.RequestURI, want.URL, want.Proto, want.Host, want.ContentLength, want.Close, want.Header)
		}
	})
}

// TestServerHandsOverMidConnection: a connection whose first request is
// the loop's and whose second is not goes on with net/http, the bytes of
// the second request included.
func TestServerHandsOverMidConnection(t *testing.T) {
	var fast atomic.Int64
	loopAddr, _ := startServers(t, dumpHandler(&fast))
	got := exchange(t, loopAddr, requestCases["plain GET"]+requestCases["chunked body"]+requestCases["plain GET"])
	if n := strings.Count(got, "HTTP/1.1 200 OK"); n != 4 {
		t.Fatalf("%d answers, want 4:\n%s", n, got)
	}
	if !strings.Contains(got, `body=\"hello\"`) && !strings.Contains(got, `body="hello"`) {
		t.Fatalf("the chunked body did not arrive:\n%s", got)
	}
	if fast.Load() != 1 {
		t.Fatalf("the loop served %d requests, want 1 (the rest is net/http's)", fast.Load())
	}
}

// TestServerClientGoneCancels: a client that closes its connection while
// its request runs has the request's context canceled.
func TestServerClientGoneCancels(t *testing.T) {
	canceled := make(chan time.Duration, 1)
	loopAddr, _ := startServers(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		select {
		case <-r.Context().Done():
			canceled <- time.Since(start)
		case <-time.After(5 * time.Second):
			canceled <- -1
		}
	}))
	c, err := net.Dial("tcp", loopAddr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	time.Sleep(200 * time.Millisecond)
	c.Close()
	if d := <-canceled; d < 0 {
		t.Fatal("the request's context was not canceled when its client went away")
	}
}

// TestServerTimeouts: a request's headers must arrive within
// ReadHeaderTimeout and a kept-alive connection is closed after
// IdleTimeout, as net/http's server does.
func TestServerTimeouts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := dumpHandler(nil)
	s := &Server{Handler: h, Fallback: &http.Server{Handler: h, ReadHeaderTimeout: 200 * time.Millisecond, IdleTimeout: 400 * time.Millisecond}}
	go s.Serve(ln)
	defer s.Shutdown(context.Background())
	closedAfter := func(send string) time.Duration {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, send)
		start := time.Now()
		br := bufio.NewReader(c)
		if strings.HasSuffix(send, "\r\n\r\n") {
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			start = time.Now()
		}
		if _, err := br.ReadByte(); err == nil {
			t.Fatal("the server sent more")
		}
		return time.Since(start)
	}
	if d := closedAfter("GET / HTTP/1.1\r\nHost: a\r\nX-Slow: "); d < 150*time.Millisecond || d > 2*time.Second {
		t.Errorf("headers cut short: closed after %s, want the 200ms ReadHeaderTimeout", d)
	}
	if d := closedAfter("GET / HTTP/1.1\r\nHost: a\r\n\r\n"); d < 300*time.Millisecond || d > 2*time.Second {
		t.Errorf("idle: closed after %s, want the 400ms IdleTimeout", d)
	}
}

// TestServerHandedConnClosesWriteFirst: a connection handed to net/http
// keeps net/http's ending of a call whose large body is not read: the
// answer, then the write side closed at once (the client reads EOF), and
// only later the connection, so that the client gets the answer rather
// than a reset.
func TestServerHandedConnClosesWriteFirst(t *testing.T) {
	loopAddr, _ := startServers(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	c, err := net.Dial("tcp", loopAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	go func() {
		io.WriteString(c, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 100000000\r\n\r\n")
		chunk := make([]byte, 64<<10)
		for {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	}()
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d", res.StatusCode)
	}
	start := time.Now()
	_, err = br.ReadByte()
	if !errors.Is(err, io.EOF) || time.Since(start) > 300*time.Millisecond {
		t.Fatalf("after the answer: %v after %s, want EOF at once (the write side closed)", err, time.Since(start))
	}
}

// TestServerRequestOutlivesReadDeadlines: the read deadline of the wait
// for a request is left in place while it runs; a request that runs past
// it (and past the watch's start) is neither canceled nor cut off, and
// the connection serves the next request.
func TestServerRequestOutlivesReadDeadlines(t *testing.T) {
	var canceled atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-r.Context().Done():
				canceled.Add(1)
			case <-time.After(400 * time.Millisecond):
			}
		}
		io.WriteString(w, "done "+r.URL.Path)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	loop := &Server{Handler: h, Fallback: &http.Server{Handler: h, ReadHeaderTimeout: 100 * time.Millisecond, IdleTimeout: 150 * time.Millisecond}}
	go loop.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		loop.Shutdown(ctx)
	})
	// One request at a time, so that the watch finds nothing of the next
	// in the buffer and reads. The first request of a connection waits
	// under the header deadline, the next ones under the idle deadline.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	for i, path := range []string{"/slow", "/slow", "/fast"} {
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d (%s): %v", i, path, err)
		}
		b, err := io.ReadAll(res.Body)
		if err != nil || string(b) != "done "+path {
			t.Fatalf("request %d: %q, %v, want %q", i, b, err, "done "+path)
		}
	}
	if n := canceled.Load(); n != 0 {
		t.Fatalf("%d requests canceled, want 0", n)
	}
	// The idle deadline still closes a connection that sends nothing.
	c, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /fast HTTP/1.1\r\nHost: a\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	start := time.Now()
	b, _ := io.ReadAll(c)
	if took := time.Since(start); !strings.Contains(string(b), "done /fast") || took > 2*time.Second {
		t.Fatalf("read %q in %v, want the answer and then the connection closed at the idle timeout", b, took)
	}
}

// TestServerHeadersPerRequest: the header maps a connection uses again
// for each request start empty: a request sees only its own headers, and
// an answer only its own.
func TestServerHeadersPerRequest(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys := make([]string, 0, len(r.Header))
		for k, vv := range r.Header {
			keys = append(keys, k+"="+strings.Join(vv, ","))
		}
		slices.Sort(keys)
		w.Header().Set("X-Path", r.URL.Path)
		if r.URL.Path == "/a" {
			w.Header().Set("X-Only-A", "1")
		}
		io.WriteString(w, strings.Join(keys, " "))
	})
	loopAddr, _ := startServers(t, h)
	got := exchange(t, loopAddr, "GET /a HTTP/1.1\r\nHost: x\r\nX-One: 1\r\nX-Two: 2\r\nX-Two: 3\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\nX-Three: 3\r\n\r\n")
	answers := strings.Split(got, "\n----\n")
	if len(answers) < 3 {
		t.Fatalf("answers:\n%s", got)
	}
	if a := answers[0]; !strings.Contains(a, "X-One=1 X-Two=2,3") || !strings.Contains(a, "X-Only-A: 1") {
		t.Errorf("first answer:\n%s\nwant X-One=1 X-Two=2,3 and X-Only-A", a)
	}
	if b := answers[1]; !strings.HasSuffix(strings.TrimSpace(b), "\r\n\r\nX-Three=3") || strings.Contains(b, "X-Only-A") {
		t.Errorf("second answer:\n%s\nwant only X-Three=3, and no X-Only-A", b)
	}
}

// TestServerPipelinedWhileServing: a request that arrives while the one
// before it runs — shorter than watchDelay, and longer — is answered as
// soon as that one is: the loop's wait on the socket does not lose that
// the socket became readable while a request ran.
func TestServerPipelinedWhileServing(t *testing.T) {
	for _, d := range []time.Duration{20 * time.Millisecond, 3 * watchDelay} {
		loopAddr, _ := startServers(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				time.Sleep(d)
			}
			io.WriteString(w, r.URL.Path)
		}))
		c, err := net.Dial("tcp", loopAddr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		start := time.Now()
		io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
		time.Sleep(d / 2)
		io.WriteString(c, "GET /next HTTP/1.1\r\nHost: a\r\n\r\n")
		br := bufio.NewReader(c)
		for _, want := range []string{"/slow", "/next"} {
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("request of %s while the one before ran %s: answer to %s: %v", want, d, want, err)
			}
			body, _ := io.ReadAll(res.Body)
			if string(body) != want {
				t.Fatalf("answer %q, want %q", body, want)
			}
		}
		if took := time.Since(start); took > d+time.Second {
			t.Errorf("the pipelined request was answered %s after the first was sent (the first took %s)", took, d)
		}
		c.Close()
	}
}

// TestServerAnswerToSlowReader: an answer larger than the socket takes at
// once, to a client that reads nothing for a while, arrives whole and in
// order; the part the socket did not take is written by a write that
// waits.
func TestServerAnswerToSlowReader(t *testing.T) {
	big := make([]byte, 16<<20)
	for i := range big {
		big[i] = byte(i*7 + i>>13)
	}
	loopAddr, _ := startServers(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(2*len(big)))
		w.Write(big[:len(big)/2]) // in pieces, through the buffer
		w.Write(big[len(big)/2:])
		w.Write(big) // and at once
	}))
	want := append(big[:len(big):len(big)], big...) // each answer's body
	// Two connections, two answers on each.
	for range 2 {
		c, err := send(t, loopAddr, "GET /big HTTP/1.1\r\nHost: a\r\n\r\nGET /big HTTP/1.1\r\nHost: a\r\n\r\n")
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		time.Sleep(200 * time.Millisecond)
		br := bufio.NewReader(c)
		for i := range 2 {
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("answer %d: %v", i, err)
			}
			body, err := io.ReadAll(res.Body)
			if err != nil {
				t.Fatalf("answer %d: body: %v after %d bytes", i, err, len(body))
			}
			if !bytes.Equal(body, want) {
				t.Fatalf("answer %d: %d bytes, not the %d written", i, len(body), len(want))
			}
		}
		c.Close()
	}
}

// TestServerWriteDeadline: a write deadline a handler sets through
// http.ResponseController holds, as on net/http: past it, writes fail
// even when the socket has room.
func TestServerWriteDeadline(t *testing.T) {
	errs := make(chan error, 2)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if err := rc.SetWriteDeadline(time.Now().Add(-time.Second)); err != nil {
			errs <- err
			return
		}
		io.WriteString(w, "late")
		errs <- rc.Flush()
	})
	loopAddr, stdAddr := startServers(t, h)
	for _, addr := range []string{stdAddr, loopAddr} {
		c, err := send(t, addr, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
		if err != nil {
			t.Fatal(err)
		}
		if err := <-errs; !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s: flush past the write deadline: %v, want %v", map[bool]string{true: "loop", false: "net/http"}[addr == loopAddr], err, os.ErrDeadlineExceeded)
		}
		c.Close()
	}
}
