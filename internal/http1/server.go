package http1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/rawio"
)

// Server serves an HTTP handler over plain TCP with a small
// HTTP/1.1 server loop of its own for the calls that make up almost all
// of an API's traffic, and hands every other connection to net/http's
// server (Fallback) as it is, bytes already read included.
//
// The loop takes a request only when its line and headers, read whole
// into the connection's 4 KiB buffer, are of the plain form below; at
// the first request that is not, the connection goes to Fallback, which
// parses that request itself and answers it, or rejects it, exactly as
// it would have had it had the connection from the start. So nothing is
// accepted here that net/http rejects (the differential tests check
// this), and every framing question — chunked bodies, Expect:
// 100-continue, obs-fold, bare LF, duplicate or malformed Content-Length,
// Transfer-Encoding with Content-Length, oversized headers — is answered
// by net/http. The plain form:
//
//   - the request line is METHOD SP /origin-form SP HTTP/1.1, with
//     METHOD one of GET, POST, PUT, DELETE, PATCH, OPTIONS and a target of
//     printable ASCII without '#';
//   - every header line is token ":" value CRLF, the value printable ASCII
//     or tab; exactly one Host, of letters, digits and ".-:[]_";
//   - no body: no Content-Length but "0", no Transfer-Encoding; no
//     Expect, Upgrade, Trailer, Pragma (net/http rewrites it) or
//     HTTP2-Settings; Connection, if present, is "close" or "keep-alive".
//
// A request taken here is served on the connection's goroutine: the
// handler's answer is written into the connection's buffer and goes out
// in one write, and the client is not read from while the handler runs
// unless it runs longer than watchDelay (then a read notices a client
// that went away and cancels the request's context, as net/http does at
// once with a read on every request).
//
// Handler and Fallback are required (the zero Server serves nothing).
// Serve may run on several listeners at once, and Shutdown from any
// goroutine.
type Server struct {
	// Handler serves every request, on either path.
	Handler http.Handler
	// Fallback is net/http's server for the connections the loop hands
	// over; its Handler should be Handler. Its ReadHeaderTimeout and
	// IdleTimeout are the loop's too.
	Fallback *http.Server
	// ErrorLog receives panics of Handler. Default: discard.
	ErrorLog *slog.Logger

	once    sync.Once
	handoff *connListener

	mu       sync.Mutex
	lns      map[net.Listener]struct{}
	conns    map[*srvConn]struct{}
	shutting atomic.Bool
}

// watchDelay is how long a request runs before its client is watched for
// going away.
const watchDelay = 50 * time.Millisecond

// maxRequestHeader is the size of the buffer a request's line and headers
// must fit in to be served by the loop: more goes to net/http, which
// applies MaxHeaderBytes (at least this plus its 4 KiB of slack).
const maxRequestHeader = 4 << 10

// Serve accepts connections on ln until Shutdown. It returns
// http.ErrServerClosed after Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	s.once.Do(func() {
		s.handoff = newConnListener(ln.Addr())
		go s.Fallback.Serve(s.handoff) //nolint:errcheck // ends with ErrServerClosed at Shutdown
	})
	s.mu.Lock()
	if s.shutting.Load() {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	if s.lns == nil {
		s.lns = map[net.Listener]struct{}{}
		s.conns = map[*srvConn]struct{}{}
	}
	s.lns[ln] = struct{}{}
	s.mu.Unlock()
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.shutting.Load() {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		c := &srvConn{s: s, nc: nc}
		if !s.track(c, true) {
			nc.Close()
			return http.ErrServerClosed
		}
		go c.serve()
	}
}

// Shutdown stops accepting, closes idle connections, waits for the
// others to finish their request (until ctx ends), and shuts Fallback
// down with the same deadline.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shutting.Store(true)
	for ln := range s.lns {
		ln.Close()
	}
	s.mu.Unlock()
	var ferr error
	done := make(chan struct{})
	go func() { ferr = s.Fallback.Shutdown(ctx); close(done) }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		s.mu.Lock()
		for c := range s.conns {
			if c.idle.Load() {
				c.nc.Close()
			}
		}
		n := len(s.conns)
		s.mu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-ctx.Done():
			<-done
			return ctx.Err()
		case <-tick.C:
		}
	}
	<-done
	return ferr
}

func (s *Server) track(c *srvConn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.shutting.Load() {
			return false
		}
		s.conns[c] = struct{}{}
	} else {
		delete(s.conns, c)
	}
	return true
}

// srvConn is one client connection served by the loop.
type srvConn struct {
	s    *Server
	nc   net.Conn
	in   inBuf
	bw   *bufio.Writer // writes through clientWriter
	idle atomic.Bool   // waiting for a request: Shutdown may close it

	// The socket's descriptor while the loop's raw read holds it (hasFD),
	// for clientWriter; and whether a handler set a write deadline, which
	// only nc's writes keep.
	fd               uintptr
	hasFD, wdeadline bool

	first                   bool // no request served yet
	remote                  string
	peer                    netip.Addr // remote's address, once peerOf has parsed it
	peerParsed, peerOK      bool
	hdrTimeout, idleTimeout time.Duration
	deadline                int // the read deadline set: noDeadline, idleDeadline, headerDeadline

	// The request's and the answer's header maps and the request's
	// header values, used again by each request: nothing keeps a request
	// or its answer once served.
	reqHeader, resHeader http.Header
	vals                 []string
	w                    respWriter

	// The watch on the client going away (see watch).
	timer     *time.Timer
	wmu       sync.Mutex
	watching  bool     // a request runs: the timer may start the watch
	active    bool     // the watch runs
	wfile     *os.File // the watch's descriptor of the socket (watchFile)
	watchDone chan struct{}
	cancel    context.CancelFunc

	// What the request's handler asked to run when its client goes away
	// (afterGone), and whether it has started.
	gone        goneFunc
	goneStarted bool
	stopGone    func() bool // c.stopAfterGone, made once

	base   context.Context // holds c under connKey
	reqCtx context.Context // the context of the request running
}

// connKey is the key under which the context of a request served by the
// loop holds its connection (see afterGone).
type connKey struct{}

// goneFunc is what runs when a request's client goes away (afterGone).
type goneFunc interface{ clientGone() }

// afterGone arranges for f.clientGone to run when the client of the
// request whose context is ctx goes away, as context.AfterFunc does, and
// returns the function that undoes it. For a request served by the loop
// it costs no allocation: the watch that cancels ctx runs f. For any
// other context, it is context.AfterFunc.
func afterGone(ctx context.Context, f goneFunc) (stop func() bool) {
	if c, ok := ctx.Value(connKey{}).(*srvConn); ok && c.reqCtx == ctx {
		c.wmu.Lock()
		c.gone, c.goneStarted = f, false
		c.wmu.Unlock()
		return c.stopGone
	}
	return context.AfterFunc(ctx, f.clientGone)
}

// stopAfterGone undoes afterGone; like the stop of context.AfterFunc, it
// reports whether it stopped f from running (false: f has started).
func (c *srvConn) stopAfterGone() bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	started := c.goneStarted
	c.gone, c.goneStarted = nil, false
	return !started
}

// serve runs the connection's requests. All of its reads happen inside
// one raw read of the socket (see advance), which waits only when a read
// came back short or found nothing: Go's network poller forgets, when a
// read starts, that the socket became readable earlier, so every
// net.Conn.Read after an answer would first find nothing. A connection
// without a file descriptor goes to Fallback whole.
//
// The buffers of connections waiting for their next request are not
// pooled: a kept-alive connection keeps its own.
func (c *srvConn) serve() {
	handed := false
	defer func() {
		c.s.track(c, false)
		if c.timer != nil {
			c.timer.Stop()
		}
		if !handed {
			c.nc.Close()
		}
	}()
	rc := rawConn(c.nc)
	if rc == nil {
		handed = true
		c.s.handoff.deliver(c.nc)
		return
	}
	c.in = inBuf{b: make([]byte, maxRequestHeader)}
	c.bw = bufio.NewWriterSize(clientWriter{c}, 4<<10)
	c.hdrTimeout, c.idleTimeout = c.s.Fallback.ReadHeaderTimeout, c.s.Fallback.IdleTimeout
	if c.idleTimeout == 0 {
		c.idleTimeout = c.hdrTimeout
	}
	c.remote = c.nc.RemoteAddr().String()
	c.reqHeader, c.resHeader = make(http.Header, 8), make(http.Header, 8)
	c.base = context.WithValue(context.Background(), connKey{}, c)
	c.stopGone = c.stopAfterGone
	c.first = true
	var next loopStep
	err := rc.Read(func(fd uintptr) bool {
		c.fd, c.hasFD = fd, true
		next = c.advance(fd)
		c.hasFD = false
		return next != waitForBytes
	})
	if err != nil || next != handOff {
		return // the client went away or timed out, as net/http: no answer
	}
	handed = true
	c.nc.SetReadDeadline(time.Time{})
	rest := bytes.Clone(c.in.bytes())
	c.s.handoff.deliver(&handedConn{Conn: c.nc, r: io.MultiReader(bytes.NewReader(rest), c.nc)})
}

// clientWriter is what c.bw writes to: while the loop's raw read holds
// the socket (every answer of the loop is written then), straight to it
// with rawio.Write; what the socket does not take at once, and any write
// after a handler set a write deadline, through nc, which waits.
type clientWriter struct{ c *srvConn }

func (w clientWriter) Write(p []byte) (int, error) {
	c := w.c
	if !c.hasFD || c.wdeadline {
		return c.nc.Write(p)
	}
	n, err := rawio.Write(c.fd, p)
	switch {
	case n == len(p):
		return n, nil
	case err == nil || err == syscall.EAGAIN:
		m, err := c.nc.Write(p[n:])
		return n + m, err
	}
	return n, rawio.OpError("write", c.nc, err)
}

// loopStep is what advance leaves the connection to do.
type loopStep int

const (
	waitForBytes loopStep = iota // wait for the socket to be readable, then advance again
	closeConn                    // the connection is done
	handOff                      // hand it to Fallback, with the bytes in c.in
)

// advance serves the requests whose line and headers are whole in c.in
// and reads from the socket fd, until it must wait for bytes. It runs
// inside the socket's raw read, so that bytes arriving after any of its
// reads wake the wait that follows: it waits without reading first when
// its last read came back short (the socket was empty then).
func (c *srvConn) advance(fd uintptr) loopStep {
	c.idle.Store(false)
	drained := false
	for {
		buf := c.in.bytes()
		if i := bytes.Index(buf, crlfcrlf); i >= 0 {
			n := i + 4
			var req http.Request
			clear(c.reqHeader)
			if !parsePlain(buf[:n], &req, c.reqHeader, &c.vals) {
				return handOff
			}
			c.in.discard(n)
			c.first = false
			req.RemoteAddr = c.remote
			if !c.serveRequest(&req) {
				return closeConn
			}
			continue
		}
		// A request whose headers end in bare LFs, or do not fit in the
		// buffer, is net/http's to judge.
		if bytes.Contains(buf, lflf) || len(buf) == len(c.in.b) {
			return handOff
		}
		if len(buf) == 0 && !c.first && c.s.shutting.Load() {
			return closeConn
		}
		if drained {
			c.waitDeadline(len(buf) == 0)
			return waitForBytes
		}
		space := c.in.space()
		m, err := rawio.Read(fd, space)
		switch {
		case err == syscall.EAGAIN:
			c.waitDeadline(len(buf) == 0)
			return waitForBytes
		case err != nil:
			return closeConn
		case m == 0:
			if len(buf) > 0 {
				return handOff // a request cut short: net/http answers it
			}
			return closeConn
		}
		c.in.end += m
		drained = m < len(space)
	}
}

// waitDeadline sets the read deadline of the wait for the client's next
// bytes: the idle timeout before a request's first byte, the header
// timeout, from the first wait, for the rest of its line and headers. A
// request whose line and headers came whole with its first bytes has not
// waited: the idle deadline was left in place.
func (c *srvConn) waitDeadline(empty bool) {
	if empty && !c.first {
		c.idle.Store(true)
		if c.idleTimeout > 0 {
			c.nc.SetReadDeadline(time.Now().Add(c.idleTimeout))
			c.deadline = idleDeadline
		}
		return
	}
	if c.deadline == headerDeadline {
		return
	}
	if c.hdrTimeout > 0 {
		c.nc.SetReadDeadline(time.Now().Add(c.hdrTimeout))
		c.deadline = headerDeadline
	} else if c.deadline != noDeadline {
		c.nc.SetReadDeadline(time.Time{})
		c.deadline = noDeadline
	}
}

// The read deadline set on a connection of the loop.
const (
	noDeadline = iota
	idleDeadline
	headerDeadline
)

var (
	crlfcrlf = []byte("\r\n\r\n")
	lflf     = []byte("\n\n")
)

// inBuf holds the bytes read from a client and not yet used: b[start:end].
type inBuf struct {
	b          []byte
	start, end int
}

func (b *inBuf) bytes() []byte { return b.b[b.start:b.end] }

func (b *inBuf) discard(n int) {
	b.start += n
	if b.start == b.end {
		b.start, b.end = 0, 0
	}
}

// space is the room after the bytes held, all of it: they are moved to
// the front first.
func (b *inBuf) space() []byte {
	if b.start > 0 {
		b.end = copy(b.b, b.b[b.start:b.end])
		b.start = 0
	}
	return b.b[b.end:]
}

// serveRequest runs the handler on parsed, with a context, and writes
// its answer. It reports whether the connection may serve another
// request.
func (c *srvConn) serveRequest(parsed *http.Request) (keep bool) {
	ctx, cancel := context.WithCancel(c.base)
	c.reqCtx = ctx
	req := parsed.WithContext(ctx) // parsed stays on the caller's stack
	clear(c.resHeader)
	c.w = respWriter{c: c, req: req, h: c.resHeader, status: 0, cl: -1}
	w := &c.w
	c.startWatch(cancel)
	defer func() {
		c.stopWatch()
		cancel()
		if p := recover(); p != nil {
			if p != http.ErrAbortHandler {
				c.s.logPanic(p)
			}
			keep = false
		}
	}()
	c.s.Handler.ServeHTTP(w, req)
	if !w.finish() {
		return false
	}
	return !req.Close && !w.closeAfter && ctx.Err() == nil
}

func (s *Server) logPanic(p any) {
	if s.ErrorLog != nil {
		s.ErrorLog.Error("http1: panic serving a request", "panic", p)
	}
}

// startWatch arms the watch on the client going away for the request
// whose context cancel ends.
func (c *srvConn) startWatch(cancel context.CancelFunc) {
	c.wmu.Lock()
	c.watching, c.cancel = true, cancel
	c.wmu.Unlock()
	if c.timer == nil {
		c.watchDone = make(chan struct{}, 1)
		c.timer = time.AfterFunc(watchDelay, c.watch)
		return
	}
	c.timer.Reset(watchDelay)
}

// watch runs when a request has run for watchDelay: it waits, through a
// second descriptor of the socket (watchFile: the loop holds the
// connection's reads), until the request ends (stopWatch moves that
// descriptor's read deadline to the past) and cancels the request's
// context when the client closed the connection or reset it. A byte of a
// next request (pipelining) is only peeked at: it stays to be read, and
// ends the watch.
func (c *srvConn) watch() {
	c.wmu.Lock()
	if !c.watching || c.active {
		// The request ended, or a late run of the timer of an earlier
		// request already watches this one.
		c.wmu.Unlock()
		return
	}
	c.active = true
	cancel := c.cancel
	c.wmu.Unlock()
	gone := false
	f, err := watchFile(c.nc)
	if err == nil {
		c.wmu.Lock()
		watching := c.watching
		if watching {
			c.wfile = f
		}
		c.wmu.Unlock()
		if watching {
			gone = waitGone(f)
		}
		c.wmu.Lock()
		c.wfile = nil
		c.wmu.Unlock()
		f.Close()
	}
	c.wmu.Lock()
	stopped := !c.watching
	c.active = false
	c.wmu.Unlock()
	if gone && !stopped {
		cancel()
		c.wmu.Lock()
		f := c.gone
		c.gone, c.goneStarted = nil, f != nil
		c.wmu.Unlock()
		if f != nil {
			f.clientGone()
		}
	}
	if stopped {
		c.watchDone <- struct{}{} // stopWatch saw the watch active and waits
	}
}

// stopWatch ends the watch of the request that finished.
func (c *srvConn) stopWatch() {
	c.timer.Stop()
	c.wmu.Lock()
	c.watching = false
	active := c.active
	if c.wfile != nil {
		c.wfile.SetReadDeadline(aLongTimeAgo)
	}
	c.wmu.Unlock()
	if active {
		<-c.watchDone
	}
}

// handedConn is a connection handed to net/http, with the bytes the loop
// had already read in front.
type handedConn struct {
	net.Conn
	r io.Reader
}

func (c *handedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite lets net/http close the write side before the connection,
// as it does after a call whose body it did not read (so that the client
// gets the answer rather than a reset).
func (c *handedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// connListener is the net.Listener through which Fallback gets the
// connections handed over.
type connListener struct {
	addr   net.Addr
	ch     chan net.Conn
	done   chan struct{}
	closed sync.Once
}

func newConnListener(addr net.Addr) *connListener {
	return &connListener{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *connListener) deliver(c net.Conn) {
	select {
	case l.ch <- c:
	case <-l.done:
		c.Close()
	}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.closed.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.addr }

// Peer is parse(r), the address of r's peer, parsed once a connection for
// the requests the loop serves (their connection keeps it); for any other
// request, parse(r) each time.
func Peer(r *http.Request, parse func(*http.Request) (netip.Addr, bool)) (netip.Addr, bool) {
	ctx := r.Context()
	if c, ok := ctx.Value(connKey{}).(*srvConn); ok && c.reqCtx == ctx && r.RemoteAddr == c.remote {
		// The request runs on its connection's goroutine, the only one
		// that touches these fields.
		if !c.peerParsed {
			c.peer, c.peerOK = parse(r)
			c.peerParsed = true
		}
		return c.peer, c.peerOK
	}
	return parse(r)
}
