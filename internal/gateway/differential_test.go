package gateway_test

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"
)

// answerOf writes the answer meant for r with the given status line and
// header lines (each ending in CRLF) and a body naming r's path.
func answerOf(c net.Conn, r *http.Request, status, extra string) {
	body := "answer to " + r.URL.Path
	write(c, fmt.Sprintf("HTTP/1.1 %s\r\nX-Answer: %s\r\n%sContent-Length: %d\r\n\r\n%s", status, r.URL.Path, extra, len(body), body))
}

// oddCases are upstream behaviours beyond leftoverCases, for the
// differential test: framings, interim answers, early ends, answers
// before the request, malformed heads.
var oddCases = []upstreamCase{
	{name: "plain", answer: func(c net.Conn, n int, r *http.Request) bool { write(c, answerTo(r)); return true }},
	{name: "plain, HEAD and GET", methods: []string{"HEAD", "GET", "HEAD", "GET"}, answer: func(c net.Conn, n int, r *http.Request) bool { write(c, answerTo(r)); return true }},
	{name: "chunked", answer: func(c net.Conn, n int, r *http.Request) bool {
		body := "answer to " + r.URL.Path
		write(c, fmt.Sprintf("HTTP/1.1 200 OK\r\nX-Answer: %s\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", r.URL.Path, len(body), body))
		return true
	}},
	{name: "chunked with trailers", answer: func(c net.Conn, n int, r *http.Request) bool {
		body := "answer to " + r.URL.Path
		write(c, fmt.Sprintf("HTTP/1.1 200 OK\r\nX-Answer: %s\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\nX-Sum: 1\r\n\r\n", r.URL.Path, len(body), body))
		return true
	}},
	{name: "close-delimited body", answer: func(c net.Conn, n int, r *http.Request) bool {
		write(c, "HTTP/1.1 200 OK\r\nX-Answer: "+r.URL.Path+"\r\n\r\nanswer to "+r.URL.Path)
		return false
	}},
	{name: "Connection: close", answer: func(c net.Conn, n int, r *http.Request) bool {
		answerOf(c, r, "200 OK", "Connection: close\r\n")
		return false
	}},
	{name: "closes after each answer unannounced", answer: func(c net.Conn, n int, r *http.Request) bool {
		write(c, answerTo(r))
		return false
	}},
	{name: "closes idle after 10ms", answer: func(c net.Conn, n int, r *http.Request) bool {
		write(c, answerTo(r))
		time.Sleep(10 * time.Millisecond)
		return false
	}},
	{name: "closed before any answer", answer: func(c net.Conn, n int, r *http.Request) bool { return false }},
	{name: "closed before the second answer", answer: func(c net.Conn, n int, r *http.Request) bool {
		if n == 1 {
			return false
		}
		write(c, answerTo(r))
		return true
	}},
	{name: "reset before the second answer", answer: func(c net.Conn, n int, r *http.Request) bool {
		if n == 1 {
			c.(*net.TCPConn).SetLinger(0)
			return false
		}
		write(c, answerTo(r))
		return true
	}},
	{name: "short body, then close", answer: func(c net.Conn, n int, r *http.Request) bool {
		write(c, "HTTP/1.1 200 OK\r\nX-Answer: "+r.URL.Path+"\r\nContent-Length: 100\r\n\r\nonly this")
		return false
	}},
	{name: "chunked cut short", answer: func(c net.Conn, n int, r *http.Request) bool {
		write(c, "HTTP/1.1 200 OK\r\nX-Answer: "+r.URL.Path+"\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nsome\r\n")
		return false
	}},
	{name: "headers cut short", answer: func(c net.Conn, n int, r *http.Request) bool {
		write(c, "HTTP/1.1 200 OK\r\nX-Answer: "+r.URL.Path+"\r\nContent-Len")
		return false
	}},
	{name: "answer before the request is read", early: func(c net.Conn) {
		write(c, "HTTP/1.1 200 OK\r\nX-Answer: /early\r\nContent-Length: 5\r\n\r\nearly")
	}, answer: func(c net.Conn, n int, r *http.Request) bool { write(c, answerTo(r)); return true }},
	{name: "100 Continue, then the answer", answer: func(c net.Conn, n int, r *http.Request) bool {
		write(c, "HTTP/1.1 100 Continue\r\n\r\n"+answerTo(r))
		return true
	}},
	{name: "103 Early Hints, then the answer", answer: func(c net.Conn, n int, r *http.Request) bool {
		write(c, "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"+answerTo(r))
		return true
	}},
	{name: "101 unasked", answer: func(c net.Conn, n int, r *http.Request) bool {
		write(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		return true
	}},
	{name: "204 with a Content-Length", answer: func(c net.Conn, n int, r *http.Request) bool {
		write(c, "HTTP/1.1 204 No Content\r\nX-Answer: "+r.URL.Path+"\r\nContent-Length: 5\r\n\r\n")
		return true
	}},
	{name: "304 without body", answer: func(c net.Conn, n int, r *http.Request) bool {
		write(c, "HTTP/1.1 304 Not Modified\r\nX-Answer: "+r.URL.Path+"\r\nETag: \"v\"\r\n\r\n")
		return true
	}},
	{name: "two equal Content-Lengths", answer: func(c net.Conn, n int, r *http.Request) bool {
		body := "answer to " + r.URL.Path
		write(c, fmt.Sprintf("HTTP/1.1 200 OK\r\nX-Answer: %s\r\nContent-Length: %d\r\nContent-Length: %d\r\n\r\n%s", r.URL.Path, len(body), len(body), body))
		return true
	}},
	{name: "two different Content-Lengths", answer: func(c net.Conn, n int, r *http.Request) bool {
		write(c, "HTTP/1.1 200 OK\r\nX-Answer: "+r.URL.Path+"\r\nContent-Length: 3\r\nContent-Length: 12\r\n\r\nanswer to /c")
		return true
	}},
	{name: "negative Content-Length", answer: func(c net.Conn, n int, r *http.Request) bool {
		write(c, "HTTP/1.1 200 OK\r\nX-Answer: "+r.URL.Path+"\r\nContent-Length: -1\r\n\r\nx")
		return true
	}},
	{name: "HTTP/1.0 answer", answer: func(c net.Conn, n int, r *http.Request) bool {
		body := "answer to " + r.URL.Path
		write(c, fmt.Sprintf("HTTP/1.0 200 OK\r\nX-Answer: %s\r\nContent-Length: %d\r\n\r\n%s", r.URL.Path, len(body), body))
		return true
	}},
	{name: "HTTP/1.0 answer, keep-alive", answer: func(c net.Conn, n int, r *http.Request) bool {
		body := "answer to " + r.URL.Path
		write(c, fmt.Sprintf("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nX-Answer: %s\r\nContent-Length: %d\r\n\r\n%s", r.URL.Path, len(body), body))
		return true
	}},
	{name: "bare LF", answer: func(c net.Conn, n int, r *http.Request) bool {
		body := "answer to " + r.URL.Path
		write(c, fmt.Sprintf("HTTP/1.1 200 OK\nX-Answer: %s\nContent-Length: %d\n\n%s", r.URL.Path, len(body), body))
		return true
	}},
	{name: "obs-fold", answer: func(c net.Conn, n int, r *http.Request) bool {
		answerOf(c, r, "200 OK", "X-Folded: a\r\n b\r\n")
		return true
	}},
	{name: "not HTTP", answer: func(c net.Conn, n int, r *http.Request) bool {
		write(c, "SSH-2.0-OpenSSH_9.6\r\n\r\n")
		return true
	}},
	{name: "status without reason", answer: func(c net.Conn, n int, r *http.Request) bool {
		answerOf(c, r, "200", "")
		return true
	}},
	{name: "status 599", answer: func(c net.Conn, n int, r *http.Request) bool {
		answerOf(c, r, "599 Odd", "")
		return true
	}},
	{name: "answer in pieces", answer: func(c net.Conn, n int, r *http.Request) bool {
		a := answerTo(r)
		for i := 0; i < len(a); i += 7 {
			write(c, a[i:min(i+7, len(a))])
			time.Sleep(time.Millisecond)
		}
		return true
	}},
	{name: "headers past the bound", answer: func(c net.Conn, n int, r *http.Request) bool {
		answerOf(c, r, "200 OK", "X-Big: "+strings.Repeat("b", 70<<10)+"\r\n")
		return true
	}},
	{name: "hop-by-hop headers", answer: func(c net.Conn, n int, r *http.Request) bool {
		answerOf(c, r, "200 OK", "Connection: X-Secret\r\nX-Secret: s\r\nKeep-Alive: timeout=5\r\nProxy-Authenticate: Basic\r\n")
		return true
	}},
	{name: "Transfer-Encoding identity", answer: func(c net.Conn, n int, r *http.Request) bool {
		answerOf(c, r, "200 OK", "Transfer-Encoding: identity\r\n")
		return true
	}},
	{name: "Transfer-Encoding gzip, chunked", answer: func(c net.Conn, n int, r *http.Request) bool {
		write(c, "HTTP/1.1 200 OK\r\nX-Answer: "+r.URL.Path+"\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n")
		return true
	}},
}

// TestForwardMatchesReverseProxy is the differential test of the
// gateway's upstream client: over every behaviour of leftoverCases and
// oddCases, several clients in turn (sharing, where the upstream allows,
// one pooled upstream connection) each get what httputil.ReverseProxy
// over http.Transport gives them: the same status, X-Answer header and
// body, and an error where it gives one.
//
// Where the two legitimately differ, the comparison says why:
//   - an answer the proxy could not get is a 502 on both sides; the
//     gateway's carries a JSON error body, ReverseProxy's none, so the
//     body of a 502 is not compared;
//   - http.Transport notices bytes an upstream sends on an idle
//     connection in a goroutine of its own, which may not have run when
//     the next call takes the connection (the next caller then gets
//     them); the gateway peeks before each reuse. The reference is given
//     transportNotices to notice before its next client;
//   - a body cut short: ReverseProxy has sent the status line and
//     whatever arrived before it aborts, as the gateway does; the client
//     sees the status and an error, so the partial body is not compared.
func TestForwardMatchesReverseProxy(t *testing.T) {
	l := newLimiter(t, noRules)
	cases := append(append([]upstreamCase(nil), leftoverCases...), oddCases...)
	if len(cases) < 30 {
		t.Fatalf("%d cases, want at least 30", len(cases))
	}
	for _, uc := range cases {
		t.Run(uc.name, func(t *testing.T) {
			methods := methodsOf(uc)
			up, idle := scriptedUpstream(t, uc)
			gw := newGateway(t, l, up, nil)
			got := callInTurn(t, gw.URL, methods, idle)

			ref, refIdle := scriptedUpstream(t, uc)
			want := callInTurn(t, referenceProxy(t, ref), methods, func() {
				refIdle()
				time.Sleep(transportNotices)
			})
			for i := range methods {
				g, w := got[i], want[i]
				if g.status == http.StatusBadGateway && w.status == http.StatusBadGateway {
					continue
				}
				if w.err != "" && g.err != "" && g.status == w.status && g.answer == w.answer {
					continue // both cut short, after the same status and headers
				}
				if g != w {
					t.Errorf("client %d (%s /c%d):\ngateway      %v\nReverseProxy %v", i, methods[i], i, g, w)
				}
			}
		})
	}
}

// transportNotices is how long the reference proxy's Transport is given
// to notice bytes on an idle connection.
const transportNotices = 50 * time.Millisecond

// referenceProxy serves a bare httputil.ReverseProxy to target, whose
// Transport bounds answers' headers as the gateway does by default, and
// returns its URL.
func referenceProxy(t testing.TB, target string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{DisableCompression: true, MaxResponseHeaderBytes: 64 << 10}
	t.Cleanup(tr.CloseIdleConnections)
	p := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(u) },
		Transport: tr,
		ErrorLog:  log.New(io.Discard, "", 0),
	}
	srv := httptest.NewUnstartedServer(p)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}
