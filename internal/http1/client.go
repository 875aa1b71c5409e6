package http1

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Client forwards calls to one plain-HTTP upstream over HTTP/1.1
// keep-alive connections of its own: it writes the request line and the
// headers into the connection's buffer, streams the body, reads the
// answer (readPlainResponse, else http.ReadResponse) and copies it to the
// caller's ResponseWriter. It is what httputil.ReverseProxy and
// http.Transport do for an ordinary call, without the request copy, the
// per-connection read and write goroutines and their hand-offs.
//
// A connection is reused only when its answer ended exactly where its
// framing says, with nothing read past it, and it is checked before each
// reuse for anything the upstream sent while it was idle (see get).
//
// Calls it does not take (see Takes) are the caller's to send another
// way (ReverseProxy): upgrades (WebSocket), Expect: 100-continue, request
// trailers, CONNECT and opaque request targets. Safe for concurrent use.
type Client struct {
	addr        string // host:port to dial
	host        string // the Host header sent: the upstream's
	prefix      string // the upstream's path prefix, escaped
	dialer      net.Dialer
	respTimeout time.Duration
	idleTimeout time.Duration
	maxIdle     int
	maxHeader   int // the bound of an answer's status lines and headers
	forwarded   func(in *http.Request, h *Forwarded)

	mu   sync.Mutex
	idle []*upConn // LIFO: the most recently used connection is reused first
}

// ClientConfig configures a Client. Zero values take their defaults.
type ClientConfig struct {
	// Upstream is where calls go: an http URL, with a path prefix joined
	// in front of each call's path. Required.
	Upstream *url.URL
	// DialTimeout bounds connecting to the upstream. Default none.
	DialTimeout time.Duration
	// ResponseTimeout bounds the wait for an answer's headers once the
	// request is sent; the body streams without a limit. Default none.
	ResponseTimeout time.Duration
	// MaxIdleConns is the number of idle connections kept. Default 1024.
	MaxIdleConns int
	// MaxResponseHeaderBytes bounds an answer's status lines and headers,
	// interim answers' included: past it, Forward fails with
	// ErrHeadTooLarge. Default 64 KiB.
	MaxResponseHeaderBytes int
	// Forwarded, when set, fills the forwarding headers of each call
	// (they replace the caller's own; see Forwarded).
	Forwarded func(in *http.Request, h *Forwarded)
}

// write writes h as header lines.
func (h *Forwarded) write(hb *headBuf) {
	if !h.Set {
		return
	}
	hb.field("X-Forwarded-For", h.For)
	for _, v := range h.Proto {
		hb.field("X-Forwarded-Proto", v)
	}
	for _, v := range h.Host {
		hb.field("X-Forwarded-Host", v)
	}
	if h.Forwarded != "" {
		hb.field("Forwarded", h.Forwarded)
	}
}

// Forwarded are the forwarding headers a Client writes into a request
// in place of the caller's X-Forwarded-For, X-Forwarded-Proto,
// X-Forwarded-Host and Forwarded. None is written unless Set.
type Forwarded struct {
	Set       bool
	For       string   // X-Forwarded-For
	Proto     []string // X-Forwarded-Proto
	Host      []string // X-Forwarded-Host
	Forwarded string   // Forwarded, when not ""
	// Vals is room for the values the filler makes, so that they cost no
	// allocation of their own.
	Vals [4]string
}

// NewClient returns a Client for cfg.Upstream.
func NewClient(cfg ClientConfig) *Client {
	target := cfg.Upstream
	addr := target.Host
	if target.Port() == "" {
		addr = net.JoinHostPort(target.Hostname(), "80")
	}
	if cfg.MaxIdleConns == 0 {
		cfg.MaxIdleConns = 1024
	}
	if cfg.MaxResponseHeaderBytes == 0 {
		cfg.MaxResponseHeaderBytes = 64 << 10
	}
	return &Client{
		addr:        addr,
		host:        target.Host,
		prefix:      target.EscapedPath(),
		dialer:      net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second},
		respTimeout: cfg.ResponseTimeout,
		idleTimeout: 90 * time.Second,
		maxIdle:     cfg.MaxIdleConns,
		maxHeader:   cfg.MaxResponseHeaderBytes,
		forwarded:   cfg.Forwarded,
	}
}

// Takes reports whether c forwards r; the others are the caller's to
// send another way.
func (f *Client) Takes(r *http.Request) bool {
	if r.Method == http.MethodConnect || r.URL.Opaque != "" || len(r.Trailer) > 0 {
		return false
	}
	h := r.Header
	if _, ok := h["Upgrade"]; ok {
		return false
	}
	if _, ok := h["Expect"]; ok {
		return false
	}
	return true
}

// get returns an idle connection, or nil when there is none. Every one
// is checked first with a non-blocking peek: an idle connection is
// reused only when the upstream has sent nothing on it since its last
// answer ended (respond checked that nothing was left then). Bytes from
// an idle upstream, or its end, close it: they are nobody's answer, and
// taken for the next call's they would hand that caller the previous
// one's (what Go's Transport calls an unsolicited response, and nginx's
// keepalive module closes a connection for).
func (f *Client) get(now time.Time) *upConn {
	for {
		f.mu.Lock()
		n := len(f.idle)
		if n == 0 {
			f.mu.Unlock()
			return nil
		}
		uc := f.idle[n-1]
		f.idle[n-1] = nil
		f.idle = f.idle[:n-1]
		f.mu.Unlock()
		if now.Sub(uc.lastUsed) > f.idleTimeout || !connAlive(uc.c) {
			uc.c.Close()
			continue
		}
		return uc
	}
}

// put returns uc to the idle connections, or closes it when they are full.
func (f *Client) put(uc *upConn, now time.Time) {
	uc.lastUsed = now
	f.mu.Lock()
	if len(f.idle) < f.maxIdle {
		f.idle = append(f.idle, uc)
		f.mu.Unlock()
		return
	}
	f.mu.Unlock()
	uc.c.Close()
}

func (f *Client) dial(ctx context.Context) (*upConn, error) {
	c, err := f.dialer.DialContext(ctx, "tcp", f.addr)
	if err != nil {
		return nil, err
	}
	return newUpConn(c), nil
}

// CloseIdle closes the idle connections.
func (f *Client) CloseIdle() {
	f.mu.Lock()
	idle := f.idle
	f.idle = nil
	f.mu.Unlock()
	for _, uc := range idle {
		uc.c.Close()
	}
}

// isHopHeader reports whether k is a hop-by-hop header (RFC 9110 section
// 7.6.1), never passed on in either direction, or one of those
// ReverseProxy drops too.
func isHopHeader(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// skipRequestHeader reports whether the request header k is not copied as
// it is: hop-by-hop, named by Connection, the forwarding headers (set
// afresh from ClientConfig.Forwarded), and those the request line and framing
// decide (Host, Content-Length).
func skipRequestHeader(k string, conn []string) bool {
	switch k {
	case "Host", "Content-Length", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded":
		return true
	}
	return isHopHeader(k) || namedByConnection(k, conn)
}

// namedByConnection reports whether k is one of the headers the
// Connection header values conn list.
func namedByConnection(k string, conn []string) bool {
	for _, v := range conn {
		for v != "" {
			var f string
			f, v, _ = strings.Cut(v, ",")
			if f = textproto.TrimString(f); f != "" && strings.EqualFold(f, k) {
				return true
			}
		}
	}
	return false
}

// retryable reports whether r may be sent again on a new connection when
// its first connection turned out closed before a byte of the answer: it
// has no body and is idempotent (RFC 9110 section 9.2.2) or carries an
// idempotency key.
func retryable(r *http.Request) bool {
	if r.Body != nil && r.Body != http.NoBody {
		return false
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	_, a := r.Header["Idempotency-Key"]
	_, b := r.Header["X-Idempotency-Key"]
	return a || b
}

// errUpstreamClosed is a reused connection the upstream had closed before
// the call's answer began.
var errUpstreamClosed = errors.New("http1: the upstream closed the connection before answering")

// Forward sends r to the upstream and copies the answer to w, leaving out
// the answer's hop-by-hop headers and those drop names (nil: none). It
// returns nil when the answer went out whole. An error before any of the
// answer was written (the upstream could not be reached, failed or did
// not answer in time; ErrHeadTooLarge; the client's context's error when
// it went away) leaves w untouched: the caller answers the call. An
// answer cut short after its status went out is a *CutShortError: the
// caller should abort the client's connection (panic with
// http.ErrAbortHandler) rather than end the answer as if it were whole.
func (f *Client) Forward(w http.ResponseWriter, r *http.Request, drop func(string) bool) error {
	ctx := r.Context()
	c := calls.Get().(*call)
	if f.forwarded != nil {
		f.forwarded(r, &c.h)
	}
	var (
		res *http.Response
		uc  *upConn
		err error
	)
	stop := afterGone(ctx, c)
	retry := retryable(r)
	for attempt := 0; ; attempt++ {
		reused := false
		if attempt == 0 {
			uc = f.get(time.Now())
			reused = uc != nil
		}
		if uc == nil {
			if uc, err = f.dial(ctx); err != nil {
				stop()
				return callError(r, err)
			}
		}
		c.use(uc)
		res, err = f.roundTrip(c, r)
		if err == nil {
			break
		}
		uc.c.Close()
		uc = nil
		if reused && retry && errors.Is(err, errUpstreamClosed) && ctx.Err() == nil {
			continue
		}
		stop()
		return callError(r, err)
	}
	watched, err := f.respond(w, uc, res, drop, stop)
	if watched && err == nil {
		*c = call{}
		calls.Put(c)
	}
	return err
}

// CutShortError is an answer that failed after its status line went out
// to the client: reading it from the upstream or writing it to the
// client.
type CutShortError struct{ Err error }

func (e *CutShortError) Error() string { return "http1: the answer was cut short: " + e.Err.Error() }
func (e *CutShortError) Unwrap() error { return e.Err }

// calls are the call states of calls that ended with their answer whole
// and their client there: nothing refers to them any more (the hook on
// the client's going is removed, and the answer's header values are not
// in the call).
var calls = sync.Pool{New: func() any { return new(call) }}

// call is the state of one forwarded call.
type call struct {
	h Forwarded

	// The answer, when readPlainResponse reads it.
	res  http.Response
	body plainBody

	mu   sync.Mutex
	uc   *upConn // the connection in use
	gone bool    // the client went away
}

func (c *call) use(uc *upConn) {
	c.mu.Lock()
	c.uc = uc
	if c.gone {
		uc.c.SetDeadline(aLongTimeAgo)
	}
	c.mu.Unlock()
}

// clientGone runs when the client goes away: it ends the wait for the
// upstream and the copy of its answer by moving the connection's deadline
// to the past.
func (c *call) clientGone() {
	c.mu.Lock()
	c.gone = true
	if c.uc != nil {
		c.uc.c.SetDeadline(aLongTimeAgo)
	}
	c.mu.Unlock()
}

// readDeadline sets the read deadline of the connection in use to t,
// unless the client went away (then it stays in the past).
func (c *call) readDeadline(t time.Time) {
	c.mu.Lock()
	if !c.gone {
		c.uc.c.SetReadDeadline(t)
	}
	c.mu.Unlock()
}

// callError is the error of a call that failed before its answer: when
// the client has gone, the context's error stands for it.
func callError(r *http.Request, err error) error {
	if cerr := r.Context().Err(); cerr != nil {
		return cerr
	}
	return err
}

// roundTrip writes r on uc and reads the answer's status line and headers;
// interim 1xx answers but 101 are skipped. The body is left on uc.br. A
// plain answer (readPlainResponse) is read into c.res.
func (f *Client) roundTrip(c *call, r *http.Request) (*http.Response, error) {
	uc := c.uc
	werr := f.writeRequest(uc, r, &c.h)
	if werr != nil {
		if cerr := (clientBodyErr{}); errors.As(werr, &cerr) {
			return nil, werr // the upstream waits for a body that will not come
		}
	}
	if werr != nil && !isBodyErr(werr) {
		// Not even the request went out: a connection the upstream closed.
		return nil, errors.Join(errUpstreamClosed, werr)
	}
	if f.respTimeout > 0 {
		c.readDeadline(time.Now().Add(f.respTimeout))
	}
	// The status lines and headers, interim answers' included, are read
	// within f.maxHeader bytes (see upReader); the body without bound.
	uc.inHead, uc.headLeft = true, f.maxHeader
	defer uc.endHead()
	if _, err := uc.br.Peek(1); err != nil {
		if werr != nil {
			return nil, werr
		}
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || notSent(err) {
			// Not a byte of an answer, or not even the end of the
			// request out (see upConn): a connection the upstream closed.
			err = errors.Join(errUpstreamClosed, err)
		}
		return nil, err
	}
	for {
		res := &c.res
		if uc.h == nil {
			uc.h = make(http.Header, 8)
		} else {
			clear(uc.h)
		}
		if !readPlainResponse(uc.br, r.Method, res, &c.body, uc.h, nil) {
			var err error
			if res, err = http.ReadResponse(uc.br, r); err != nil {
				if werr != nil {
					return nil, werr
				}
				return nil, err
			}
		}
		if res.StatusCode >= 100 && res.StatusCode < 200 && res.StatusCode != http.StatusSwitchingProtocols {
			continue // 100 Continue, 103 Early Hints: the final answer follows
		}
		if res.StatusCode == http.StatusSwitchingProtocols {
			return nil, errors.New("http1: the upstream switched protocols on a call that asked for no upgrade")
		}
		if werr != nil {
			// The upstream answered before it took the whole body (a 413,
			// say): pass the answer on, and do not reuse the connection.
			res.Close = true
		}
		if f.respTimeout > 0 && (res.ContentLength < 0 || int64(uc.br.Buffered()) < res.ContentLength) {
			// The body streams with no time limit. (A body already in
			// the buffer is read without the connection: its deadline,
			// passed by the time the connection is next used, is set
			// again before each read from it.)
			c.readDeadline(time.Time{})
		}
		return res, nil
	}
}

// aLongTimeAgo is a deadline in the past: it ends any read or write.
var aLongTimeAgo = time.Unix(1, 0)

// bodyErr is a failure sending the request body to the upstream, which
// may have answered without reading it all.
type bodyErr struct{ err error }

func (e bodyErr) Error() string { return e.err.Error() }
func (e bodyErr) Unwrap() error { return e.err }

// clientBodyErr is a failure reading the request body from the client (it
// went away, or sent too slowly): the call ends there.
type clientBodyErr struct{ err error }

func (e clientBodyErr) Error() string { return e.err.Error() }
func (e clientBodyErr) Unwrap() error { return e.err }

// bodyReader reads the client's body and keeps its error, so that a
// failure of the client is told from one of the upstream.
type bodyReader struct {
	r   io.Reader
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

// bodyError classifies err, from copying the body read through br.
func bodyError(err error, br *bodyReader) error {
	if br.err != nil {
		return clientBodyErr{br.err}
	}
	return bodyErr{err}
}

func isBodyErr(err error) bool {
	var be bodyErr
	return errors.As(err, &be)
}

// writeRequest writes the request line, the headers and the body of r.
// An error of the body is a bodyErr.
func (f *Client) writeRequest(uc *upConn, r *http.Request, h *Forwarded) error {
	bw := uc.bw
	hb := newHeadBuf(bw)
	hb.str(r.Method)
	hb.str(" ")
	f.writeTarget(&hb, r.URL)
	hb.str(" HTTP/1.1\r\n")
	hb.field("Host", f.host)
	conn := r.Header["Connection"]
	for k, vv := range r.Header {
		if !validFieldName(k) {
			// A name no upstream may be sent (one net/http's reader
			// let through, such as "Name " before its colon) is left
			// out, as http.Request.Write leaves it out.
			continue
		}
		if skipRequestHeader(k, conn) {
			// "TE: trailers" is passed on, as ReverseProxy does: it is
			// how a gRPC client says it reads trailers.
			if k == "Te" && hasToken(vv, "trailers") {
				hb.str("Te: trailers\r\n")
			}
			continue
		}
		for _, v := range vv {
			hb.field(k, v)
		}
	}
	h.write(&hb)
	body := r.Body != nil && r.Body != http.NoBody
	switch {
	case r.ContentLength > 0 || (r.ContentLength == 0 && sendsZeroLength(r.Method)):
		hb.str("Content-Length: ")
		hb.int(r.ContentLength)
		hb.crlf()
	case r.ContentLength < 0 && body:
		hb.str("Transfer-Encoding: chunked\r\n")
	}
	hb.crlf()
	hb.done()
	if !body || r.ContentLength == 0 {
		return uc.flushLast()
	}
	buf := buffers.Get().(*[]byte)
	defer buffers.Put(buf)
	if r.ContentLength > 0 {
		// The headers and a small body go out in one write.
		br := &bodyReader{r: r.Body}
		n, err := io.CopyBuffer(writerOnly{bw}, br, *buf)
		if err == nil && n != r.ContentLength {
			br.err = io.ErrUnexpectedEOF
		}
		if err != nil || br.err != nil {
			return bodyError(err, br)
		}
		return uc.flushLast()
	}
	cw := httputil.NewChunkedWriter(bw)
	br := &bodyReader{r: r.Body}
	if _, err := io.CopyBuffer(flushWriter{cw, bw}, br, *buf); err != nil {
		return bodyError(err, br)
	}
	if err := cw.Close(); err != nil {
		return bodyErr{err}
	}
	bw.WriteString("\r\n")
	return bw.Flush()
}

// writerOnly hides ReadFrom, so that io.CopyBuffer uses the pooled buffer
// it is given.
type writerOnly struct{ io.Writer }

// flushWriter flushes bw after every write through w, so that a request
// body that arrives in pieces reaches the upstream in pieces.
type flushWriter struct {
	w  io.Writer
	bw *bufio.Writer
}

func (fw flushWriter) Write(p []byte) (int, error) {
	n, err := fw.w.Write(p)
	if err == nil {
		err = fw.bw.Flush()
	}
	return n, err
}

// sendsZeroLength reports whether a call of method without a body is sent
// with "Content-Length: 0", as http.Transport does: many servers want one
// on these.
func sendsZeroLength(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead:
		return false
	}
	return true
}

// writeTarget writes the origin-form request target: the upstream's path
// prefix joined with the call's path, and the call's query.
func (f *Client) writeTarget(hb *headBuf, u *url.URL) {
	path := escapedPath(u)
	if f.prefix != "" {
		path = joinPath(f.prefix, path)
	}
	if path == "" {
		path = "/"
	}
	hb.str(path)
	if u.ForceQuery || u.RawQuery != "" {
		hb.str("?")
		hb.str(u.RawQuery)
	}
}

// joinPath joins two escaped paths with one slash between them, as
// ReverseProxy's SetURL does.
func joinPath(a, b string) string {
	aslash, bslash := strings.HasSuffix(a, "/"), strings.HasPrefix(b, "/")
	switch {
	case aslash && bslash:
		return a + b[1:]
	case !aslash && !bslash:
		return a + "/" + b
	}
	return a + b
}

func hasToken(vv []string, token string) bool {
	for _, v := range vv {
		for v != "" {
			var f string
			f, v, _ = strings.Cut(v, ",")
			if strings.EqualFold(textproto.TrimString(f), token) {
				return true
			}
		}
	}
	return false
}

// respond copies res to w and then returns uc to the idle connections, or
// closes it when the answer or the copy says it cannot be reused. stop
// ends the watch on the client's context; respond reports what it
// returned (true: the client did not go away).
func (f *Client) respond(w http.ResponseWriter, uc *upConn, res *http.Response, drop func(string) bool, stop func() bool) (watched bool, err error) {
	out := w.Header()
	conn := res.Header["Connection"]
	for k, vv := range res.Header {
		if isHopHeader(k) || namedByConnection(k, conn) || (drop != nil && drop(k)) {
			continue
		}
		if prev, ok := out[k]; ok {
			out[k] = append(prev, vv...)
		} else {
			out[k] = vv
		}
	}
	announced := len(res.Trailer)
	if announced > 0 {
		keys := make([]string, 0, announced)
		for k := range res.Trailer {
			keys = append(keys, k)
		}
		out["Trailer"] = []string{strings.Join(keys, ", ")}
	}
	w.WriteHeader(res.StatusCode)

	buf := buffers.Get().(*[]byte)
	_, err = copyBody(w, res, *buf)
	buffers.Put(buf)
	if err == nil {
		err = res.Body.Close()
	}
	// A connection whose deadline the client's going moved is not reused,
	// nor one whose answer did not end exactly where its framing says:
	// anything read past its end (a body to HEAD, bytes after the
	// Content-Length or the last chunk, a body after 204 or 304, a second
	// answer) is nobody's answer.
	if watched = stop(); watched && err == nil && !res.Close && uc.br.Buffered() == 0 {
		f.put(uc, time.Now())
	} else {
		uc.c.Close()
	}
	if err != nil {
		return watched, &CutShortError{err}
	}
	if len(res.Trailer) > 0 {
		// Trailers go out only in a chunked answer: flush to make it one.
		http.NewResponseController(w).Flush()
	}
	if len(res.Trailer) == announced {
		for k, vv := range res.Trailer {
			out[k] = vv
		}
		return watched, nil
	}
	for k, vv := range res.Trailer {
		out[http.TrailerPrefix+k] = vv
	}
	return watched, nil
}

// copyBody copies res's body to w through buf. An answer of unknown length
// (a stream) is flushed after every read, as ReverseProxy does.
func copyBody(w http.ResponseWriter, res *http.Response, buf []byte) (int64, error) {
	if res.Body == http.NoBody || res.ContentLength == 0 {
		return 0, nil
	}
	var rc *http.ResponseController
	if res.ContentLength < 0 {
		rc = http.NewResponseController(w)
	}
	var n int64
	for {
		nr, rerr := res.Body.Read(buf)
		if nr > 0 {
			nw, werr := w.Write(buf[:nr])
			n += int64(nw)
			if werr != nil {
				return n, werr
			}
			if rc != nil {
				if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
					return n, err
				}
			}
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// BufferPool lends httputil.ReverseProxy the Client's 32 KiB copy
// buffers.
type BufferPool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (BufferPool) Get() []byte  { return *buffers.Get().(*[]byte) }
func (BufferPool) Put(b []byte) { buffers.Put(&b) }
