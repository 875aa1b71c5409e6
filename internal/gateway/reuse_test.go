package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/gateway"
	"github.com/sluicehq/sluice/internal/testkit/listentest"
)

// upstreamCase is one behaviour of a scripted upstream, raw bytes on a
// TCP connection: answer writes what the upstream sends for the n-th
// request of its connection (from 0) and reports whether the connection
// stays open; early, when set, runs on a new connection once the first
// request has begun to arrive, before it is read.
type upstreamCase struct {
	name    string
	methods []string // the clients' methods, one client each; default four GETs
	early   func(c net.Conn)
	answer  func(c net.Conn, n int, r *http.Request) (keep bool)
}

// scriptedUpstream serves uc on a loopback port and returns its URL and
// a function that waits until the upstream is idle: no connection is
// between reading a request and having written all it writes for it
// (late bytes included), so that a client sent after it cannot race the
// upstream's writes for the one before.
func scriptedUpstream(t testing.TB, uc upstreamCase) (string, func()) {
	t.Helper()
	var busy atomic.Int64
	addr := listentest.ServeTCP(t, func(c net.Conn) {
		defer c.Close()
		br := bufio.NewReader(c)
		early := false
		for n := 0; ; n++ {
			if _, err := br.Peek(1); err != nil {
				if early {
					busy.Add(-1)
				}
				return
			}
			if n == 0 && uc.early != nil {
				busy.Add(1)
				early = true
				uc.early(c)
			}
			busy.Add(1)
			r, err := http.ReadRequest(br)
			if err != nil {
				busy.Add(-1)
				return
			}
			io.Copy(io.Discard, r.Body)
			keep := uc.answer(c, n, r)
			if !keep {
				c.Close() // before the upstream counts as idle
			}
			busy.Add(-1)
			if early {
				busy.Add(-1)
				early = false
			}
			if !keep {
				return
			}
		}
	})
	idle := func() {
		for deadline := time.Now().Add(2 * time.Second); busy.Load() > 0 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
	}
	return "http://" + addr, idle
}

// answerTo is the answer meant for r: it names r's path in a header and
// in its body.
func answerTo(r *http.Request) string { return answerWith(r, "") }

// answerWith is answerTo with extra header lines (each ending in CRLF).
func answerWith(r *http.Request, extra string) string {
	body := "answer to " + r.URL.Path
	if r.Method == http.MethodHead {
		return fmt.Sprintf("HTTP/1.1 200 OK\r\nX-Answer: %s\r\n%sContent-Length: %d\r\n\r\n", r.URL.Path, extra, len(body))
	}
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nX-Answer: %s\r\n%sContent-Length: %d\r\n\r\n%s", r.URL.Path, extra, len(body), body)
}

// smuggled is a whole answer that no client asked for.
const smuggled = "HTTP/1.1 200 OK\r\nX-Answer: /smuggled\r\nContent-Length: 16\r\n\r\nsmuggled answer!"

func write(c net.Conn, s string) { io.WriteString(c, s) }

// clientResult is what one client saw of its call.
type clientResult struct {
	status int
	answer string // X-Answer
	body   string
	err    string // "" when the call and its body read went through
}

func (r clientResult) String() string {
	if r.err != "" && r.status == 0 {
		return "error: " + r.err
	}
	s := fmt.Sprintf("%d X-Answer=%q body=%q", r.status, r.answer, r.body)
	if r.err != "" {
		s += " then error: " + r.err
	}
	return s
}

// callInTurn sends each method in turn to base, each from a client of
// its own (a new connection), to path /c<i>, waiting for idle between
// calls; it returns what each client saw.
func callInTurn(t testing.TB, base string, methods []string, idle func()) []clientResult {
	t.Helper()
	out := make([]clientResult, len(methods))
	for i, m := range methods {
		tr := &http.Transport{DisableKeepAlives: true, DisableCompression: true}
		c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		req, err := http.NewRequest(m, fmt.Sprintf("%s/c%d", base, i), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			out[i].err = "call failed"
		} else {
			b, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			out[i] = clientResult{status: resp.StatusCode, answer: resp.Header.Get("X-Answer"), body: string(b)}
			if rerr != nil {
				out[i].err = "body cut short"
			}
		}
		tr.CloseIdleConnections()
		idle()
	}
	return out
}

func methodsOf(uc upstreamCase) []string {
	if uc.methods != nil {
		return uc.methods
	}
	return []string{"GET", "GET", "GET", "GET"}
}

// leftoverCases are upstreams that send bytes past the end of an answer,
// at once or a little later: each must close the connection they came on,
// so that every client gets its own answer.
var leftoverCases = []upstreamCase{
	{name: "body to HEAD", methods: []string{"HEAD", "GET", "HEAD", "GET"}, answer: func(c net.Conn, n int, r *http.Request) bool {
		write(c, answerTo(r)+"answer to "+r.URL.Path) // the HEAD's length, and a body
		return true
	}},
	{name: "smuggled answer in a body to HEAD", methods: []string{"HEAD", "GET", "GET", "GET"}, answer: func(c net.Conn, n int, r *http.Request) bool {
		if r.Method == http.MethodHead {
			write(c, "HTTP/1.1 200 OK\r\nX-Answer: "+r.URL.Path+"\r\nContent-Length: "+fmt.Sprint(len(smuggled))+"\r\n\r\n"+smuggled)
			return true
		}
		write(c, answerTo(r))
		return true
	}},
	{name: "bytes after Content-Length", answer: func(c net.Conn, n int, r *http.Request) bool {
		write(c, answerTo(r)+"trailing garbage")
		return true
	}},
	{name: "body after 204", answer: func(c net.Conn, n int, r *http.Request) bool {
		if n == 0 {
			write(c, "HTTP/1.1 204 No Content\r\nX-Answer: "+r.URL.Path+"\r\n\r\n"+smuggled)
			return true
		}
		write(c, answerTo(r))
		return true
	}},
	{name: "body after 304", answer: func(c net.Conn, n int, r *http.Request) bool {
		if n == 0 {
			write(c, "HTTP/1.1 304 Not Modified\r\nX-Answer: "+r.URL.Path+"\r\nContent-Length: 16\r\n\r\n"+smuggled)
			return true
		}
		write(c, answerTo(r))
		return true
	}},
	{name: "Content-Length and chunked, trailing bytes", answer: func(c net.Conn, n int, r *http.Request) bool {
		body := "answer to " + r.URL.Path
		write(c, fmt.Sprintf("HTTP/1.1 200 OK\r\nX-Answer: %s\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n%s", r.URL.Path, len(body), body, smuggled))
		return true
	}},
	{name: "two answers in one write", answer: func(c net.Conn, n int, r *http.Request) bool {
		write(c, answerTo(r)+smuggled)
		return true
	}},
	{name: "late extra bytes", answer: func(c net.Conn, n int, r *http.Request) bool {
		write(c, answerTo(r))
		time.Sleep(20 * time.Millisecond)
		write(c, smuggled)
		return true
	}},
	{name: "Content-Length shorter than the body (Node, non-ASCII)", answer: func(c net.Conn, n int, r *http.Request) bool {
		body := "answer to " + r.URL.Path + " — café" // Content-Length in characters, not bytes
		write(c, fmt.Sprintf("HTTP/1.1 200 OK\r\nX-Answer: %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n\r\n%s", r.URL.Path, len([]rune(body)), body))
		return true
	}},
	{name: "chunked, then bytes", answer: func(c net.Conn, n int, r *http.Request) bool {
		body := "answer to " + r.URL.Path
		write(c, fmt.Sprintf("HTTP/1.1 200 OK\r\nX-Answer: %s\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n%s", r.URL.Path, len(body), body, smuggled))
		return true
	}},
	{name: "unasked 100 Continue with a body", answer: func(c net.Conn, n int, r *http.Request) bool {
		write(c, answerTo(r)+"HTTP/1.1 100 Continue\r\n\r\n")
		return true
	}},
}

// TestForwardNeverReusesLeftovers: an upstream that sends anything past
// the end of an answer (a body to HEAD, bytes after Content-Length, a
// body after 204 or 304, a second answer, bytes a little later) does so
// on a connection that is then closed: several clients in turn, sharing
// the pooled connection, each get their own answer.
func TestForwardNeverReusesLeftovers(t *testing.T) {
	l := newLimiter(t, noRules)
	for _, uc := range leftoverCases {
		t.Run(uc.name, func(t *testing.T) {
			up, idle := scriptedUpstream(t, uc)
			gw := newGateway(t, l, up, nil)
			got := callInTurn(t, gw.URL, methodsOf(uc), idle)
			for i, g := range got {
				path := fmt.Sprintf("/c%d", i)
				if g.answer != path || g.status != 200 && g.status != 204 && g.status != 304 {
					t.Errorf("client %d (%s %s) got %v, want its own answer", i, methodsOf(uc)[i], path, g)
				}
			}
		})
	}
}

// TestForwardBoundsAnswerHeaders: an answer whose status line and headers
// pass Config.MaxResponseHeaderBytes is a 502 (not relayed whole, nor held
// in memory), through the gateway's client and the ReverseProxy path
// (Expect) alike; one within it goes through.
func TestForwardBoundsAnswerHeaders(t *testing.T) {
	l := newLimiter(t, noRules)
	const bound = 16 << 10
	for _, tt := range []struct {
		name   string
		header int // bytes of X-Big
		want   int
	}{{"within", bound - 200, 200}, {"past", bound + 1, 502}, {"far past", 4 << 20, 502}} {
		t.Run(tt.name, func(t *testing.T) {
			up, idle := scriptedUpstream(t, upstreamCase{answer: func(c net.Conn, n int, r *http.Request) bool {
				big := "X-Big: " + strings.Repeat("b", tt.header) + "\r\n"
				write(c, answerWith(r, big))
				return true
			}})
			gw := newGateway(t, l, up, func(c *gateway.Config) { c.MaxResponseHeaderBytes = bound })
			for _, expect := range []bool{false, true} {
				req := newReq(t, "PUT", gw.URL+"/x", strings.NewReader("data"))
				if expect {
					req.Header.Set("Expect", "100-continue")
				}
				resp, _ := do(t, http.DefaultClient, req)
				if resp.StatusCode != tt.want {
					t.Errorf("Expect %v: X-Big of %d bytes: %d, want %d", expect, tt.header, resp.StatusCode, tt.want)
				}
				idle()
			}
		})
	}
}
