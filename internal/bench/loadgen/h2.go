package loadgen

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A leanConn is one HTTP/2 connection of the lean gRPC client: unary calls
// whose request message is already encoded, and whose reply message is
// handed back as bytes for the caller to decode (or only partly decode).
//
// Through grpc-go, `sluice bench --grpc` spent 55–120 µs of CPU per call on
// the project's 2-core machine (a client stream, contexts, goroutine
// hand-overs, whole proto messages encoded and decoded, and the page faults
// of a heap that grows with every call's garbage), more than the service it
// measured, from which a generator on the same machine takes that CPU. The lean client does what a load generator needs and
// no more, on golang.org/x/net/http2's Framer and hpack:
//
//   - the request's header block is encoded once, with the static table
//     and literals that are never indexed, so it needs no encoder state and
//     every stream reuses the same bytes;
//   - the caller writes its HEADERS and DATA frames itself: frames are
//     appended to a connection buffer under a lock, and whichever caller
//     finds no write in progress writes the buffer out, taking what others
//     appended meanwhile (several calls per system call under load);
//   - one reader goroutine per connection reads the server's frames and
//     wakes the caller whose stream ends (one goroutine hand-over per
//     call);
//   - a worker reuses one stream record, so a call allocates nothing.
//
// Flow control is HTTP/2's: the client advertises recvWindow for streams
// and the connection and gives received DATA back with WINDOW_UPDATE once
// half a window is used; it sends DATA only within the server's windows,
// waiting for its WINDOW_UPDATE when they are used up, and follows the
// server's SETTINGS (initial window, frame size), answering SETTINGS and
// PING with their ACK. After GOAWAY, streams the server will not process
// fail and new calls go to a new connection; so do they after the
// connection breaks.
type leanConn struct {
	nc net.Conn
	fr *http2.Framer // read by the reader; written under mu (into wbuf)

	recvWindow uint32 // the window advertised for streams and the connection

	// Reader-only state.
	dec     *hpack.Decoder
	cur     *leanStream // the stream of the header block being decoded, nil if gone
	curEnd  bool        // the header block ends its stream
	unacked uint32      // connection DATA received and not yet given back

	mu       sync.Mutex
	wake     sync.Cond // a send window grew, or the connection failed
	wbuf     []byte    // frames waiting to be written
	spare    []byte    // the other write buffer
	flushing bool      // a caller is writing wbuf out
	nextID   uint32
	sendWin  int64 // connection send window
	initWin  int64 // the server's SETTINGS_INITIAL_WINDOW_SIZE
	maxFrame int   // the server's SETTINGS_MAX_FRAME_SIZE
	streams  map[uint32]*leanStream
	err      error // set once the connection has failed
	draining bool  // GOAWAY received: no new streams
	timeout  time.Duration
}

// leanStream is one worker's call: reused from call to call, and touched
// by the reader only under the connection's mu while it is in streams.
type leanStream struct {
	id      uint32
	sendWin int64
	recvd   uint32 // DATA received on this stream since its last WINDOW_UPDATE
	done    chan struct{}

	// The answer, set by the reader.
	httpStatus int
	grpcStatus int // -1 until seen
	grpcMsg    string
	badType    string // a content-type that is not gRPC's
	buf        []byte // DATA received: length-prefixed messages
	err        error
}

// leanDefaultWindow is the receive window the lean client advertises: the
// replies of a few thousand calls, so that WINDOW_UPDATEs are rare.
const leanDefaultWindow = 1 << 24

// errLeanGoAway fails calls the server will not process after GOAWAY.
var errLeanGoAway = errors.New("loadgen: server sent GOAWAY")

// dialLean opens an HTTP/2 connection to addr (TLS with cfg, or h2c when
// cfg is nil) and starts its reader.
func dialLean(ctx context.Context, addr string, cfg *tls.Config, recvWindow uint32, timeout time.Duration) (*leanConn, error) {
	d := net.Dialer{Timeout: timeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	if cfg != nil {
		cfg = cfg.Clone()
		cfg.NextProtos = []string{"h2"}
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(nc, cfg)
		tc.SetDeadline(time.Now().Add(timeout))
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("loadgen: %w", err)
		}
		tc.SetDeadline(time.Time{})
		if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
			nc.Close()
			return nil, fmt.Errorf("loadgen: %s did not agree to HTTP/2 over TLS (ALPN %q)", addr, p)
		}
		nc = tc
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	c := &leanConn{nc: nc, recvWindow: recvWindow, nextID: 1, sendWin: 65535, initWin: 65535,
		maxFrame: 16384, streams: map[uint32]*leanStream{}, timeout: timeout}
	c.wake.L = &c.mu
	c.fr = http2.NewFramer(leanWriter{c}, bufio.NewReaderSize(nc, 64<<10))
	c.fr.SetReuseFrames()
	c.dec = hpack.NewDecoder(4096, c.field)
	c.dec.SetMaxStringLength(64 << 10)

	c.mu.Lock()
	c.wbuf = append(c.wbuf, http2.ClientPreface...)
	c.fr.WriteSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: recvWindow})
	if recvWindow > 65535 {
		c.fr.WriteWindowUpdate(0, recvWindow-65535)
	}
	c.flushLocked(false)
	err = c.err
	c.mu.Unlock()
	if err != nil {
		nc.Close()
		return nil, err
	}
	go c.read()
	return c, nil
}

// leanWriter appends the Framer's frames to the connection's write buffer
// (the caller holds mu).
type leanWriter struct{ c *leanConn }

func (w leanWriter) Write(p []byte) (int, error) {
	w.c.wbuf = append(w.c.wbuf, p...)
	return len(p), nil
}

// flushLocked writes the buffered frames out unless another caller is
// already doing so (it will take them). mu is held, and released during the
// write. With batch, the caller yields before it writes.
func (c *leanConn) flushLocked(batch bool) {
	if c.flushing {
		return
	}
	c.flushing = true
	if batch {
		// Let the workers that are ready to run append their frames
		// first: one system call then carries several calls (on a busy
		// 2-core machine, a fifth less CPU per call).
		c.mu.Unlock()
		runtime.Gosched()
		c.mu.Lock()
	}
	for len(c.wbuf) > 0 && c.err == nil {
		buf := c.wbuf
		c.wbuf = c.spare[:0]
		c.mu.Unlock()
		if c.timeout > 0 {
			c.nc.SetWriteDeadline(time.Now().Add(c.timeout))
		}
		_, err := c.nc.Write(buf)
		c.mu.Lock()
		c.spare = buf[:0]
		if err != nil {
			c.failLocked(fmt.Errorf("loadgen: write: %w", err))
		}
	}
	c.flushing = false
}

// failLocked ends the connection with err: every open stream fails with it.
func (c *leanConn) failLocked(err error) {
	if c.err == nil {
		c.err = err
	}
	for id, st := range c.streams {
		delete(c.streams, id)
		st.err = err
		st.done <- struct{}{}
	}
	c.nc.Close()
	c.wake.Broadcast()
}

// live reports whether the connection takes new streams.
func (c *leanConn) live() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err == nil && !c.draining
}

// close ends the connection.
func (c *leanConn) close() {
	c.mu.Lock()
	c.failLocked(errors.New("loadgen: connection closed"))
	c.mu.Unlock()
}

// appendFrameHeader appends an HTTP/2 frame header.
func appendFrameHeader(b []byte, length int, typ http2.FrameType, flags http2.Flags, id uint32) []byte {
	return append(b, byte(length>>16), byte(length>>8), byte(length), byte(typ), byte(flags),
		byte(id>>24), byte(id>>16), byte(id>>8), byte(id))
}

// send starts st as a new stream: the header block hdr, then body as DATA
// within the send windows. It returns an error when the connection takes no
// new streams; a stream the server ends early (RST_STREAM) stops sending.
func (c *leanConn) send(st *leanStream, hdr, body []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.err != nil:
		return c.err
	case c.draining:
		return errLeanGoAway
	case c.nextID > 1<<31-1:
		c.draining = true // stream IDs used up: a new connection takes over
		if len(c.streams) == 0 {
			c.failLocked(errLeanGoAway)
		}
		return errLeanGoAway
	}
	st.id = c.nextID
	c.nextID += 2
	st.sendWin = c.initWin
	st.recvd = 0
	st.httpStatus, st.grpcStatus, st.grpcMsg, st.badType, st.err = 0, -1, "", "", nil
	st.buf = st.buf[:0]
	c.streams[st.id] = st
	if len(hdr) > c.maxFrame {
		// Not for a load generator's few headers; a server with frames
		// this small is not one to load.
		delete(c.streams, st.id)
		return fmt.Errorf("loadgen: header block of %d bytes exceeds the server's frame size %d", len(hdr), c.maxFrame)
	}
	c.wbuf = appendFrameHeader(c.wbuf, len(hdr), http2.FrameHeaders, http2.FlagHeadersEndHeaders, st.id)
	c.wbuf = append(c.wbuf, hdr...)
	for first := true; first || len(body) > 0; first = false {
		n := min(int64(len(body)), c.sendWin, st.sendWin, int64(c.maxFrame))
		for n <= 0 && len(body) > 0 {
			c.flushLocked(false)
			if c.streams[st.id] != st {
				return nil // the stream has ended; its caller hears why
			}
			n = min(int64(len(body)), c.sendWin, st.sendWin, int64(c.maxFrame))
			if n <= 0 {
				c.wake.Wait()
				if c.streams[st.id] != st {
					return nil
				}
				n = min(int64(len(body)), c.sendWin, st.sendWin, int64(c.maxFrame))
			}
		}
		var flags http2.Flags
		if int(n) == len(body) {
			flags = http2.FlagDataEndStream
		}
		c.wbuf = appendFrameHeader(c.wbuf, int(n), http2.FrameData, flags, st.id)
		c.wbuf = append(c.wbuf, body[:n]...)
		body = body[n:]
		c.sendWin -= n
		st.sendWin -= n
	}
	c.flushLocked(true)
	return nil
}

// cancel abandons st (a timeout or a cancelled run): the server is told
// with RST_STREAM, and an answer that arrived meanwhile is dropped.
func (c *leanConn) cancel(st *leanStream) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.streams[st.id] != st {
		<-st.done // ended meanwhile: its signal is waiting
		return
	}
	delete(c.streams, st.id)
	if c.err == nil {
		c.fr.WriteRSTStream(st.id, http2.ErrCodeCancel)
		c.flushLocked(false)
	}
}

// endLocked ends st's call and wakes its caller.
func (c *leanConn) endLocked(st *leanStream, err error) {
	delete(c.streams, st.id)
	if st.err == nil {
		st.err = err
	}
	st.done <- struct{}{}
	c.wake.Broadcast() // a sender waiting for this stream's window stops
	if c.draining && len(c.streams) == 0 && c.err == nil {
		c.failLocked(errLeanGoAway) // the last answer after GOAWAY is in
	}
}

// read is the connection's reader: it reads frames until the connection
// fails.
func (c *leanConn) read() {
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			c.mu.Lock()
			c.failLocked(fmt.Errorf("loadgen: connection: %w", err))
			c.mu.Unlock()
			return
		}
		c.mu.Lock()
		err = c.frame(f)
		if err != nil {
			c.failLocked(err)
		}
		if len(c.wbuf) > 0 {
			c.flushLocked(false)
		}
		c.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// frame handles one frame from the server; mu is held.
func (c *leanConn) frame(f http2.Frame) error {
	id := f.Header().StreamID
	switch f := f.(type) {
	case *http2.DataFrame:
		// Flow control counts the whole payload, padding included.
		n := f.Header().Length
		c.unacked += n
		if c.unacked >= c.recvWindow/2 {
			c.fr.WriteWindowUpdate(0, c.unacked)
			c.unacked = 0
		}
		st := c.streams[id]
		if st == nil {
			return nil // a stream given up on
		}
		st.buf = append(st.buf, f.Data()...)
		st.recvd += n
		if f.StreamEnded() {
			c.endLocked(st, errors.New("loadgen: stream ended without grpc-status"))
		} else if st.recvd >= c.recvWindow/2 && n > 0 {
			c.fr.WriteWindowUpdate(id, st.recvd)
			st.recvd = 0
		}
	case *http2.HeadersFrame:
		c.cur, c.curEnd = c.streams[id], f.StreamEnded()
		return c.headerBlock(f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.ContinuationFrame:
		return c.headerBlock(f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.RSTStreamFrame:
		if st := c.streams[id]; st != nil {
			c.endLocked(st, fmt.Errorf("loadgen: stream reset by the server: %v", f.ErrCode))
		}
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		err := f.ForeachSetting(func(s http2.Setting) error {
			if err := s.Valid(); err != nil {
				return fmt.Errorf("loadgen: server settings: %w", err)
			}
			switch s.ID {
			case http2.SettingInitialWindowSize:
				delta := int64(s.Val) - c.initWin
				c.initWin = int64(s.Val)
				for _, st := range c.streams {
					st.sendWin += delta
				}
			case http2.SettingMaxFrameSize:
				c.maxFrame = int(s.Val)
			}
			return nil
		})
		if err != nil {
			return err
		}
		c.fr.WriteSettingsAck()
		c.wake.Broadcast()
	case *http2.WindowUpdateFrame:
		if id == 0 {
			c.sendWin += int64(f.Increment)
		} else if st := c.streams[id]; st != nil {
			st.sendWin += int64(f.Increment)
		}
		c.wake.Broadcast()
	case *http2.PingFrame:
		if !f.IsAck() {
			c.fr.WritePing(true, f.Data)
		}
	case *http2.GoAwayFrame:
		// Streams above the last one the server processes will never be
		// answered; the others may still be. No new stream goes here.
		c.draining = true
		for sid, st := range c.streams {
			if sid > f.LastStreamID {
				c.endLocked(st, fmt.Errorf("%w (%v)", errLeanGoAway, f.ErrCode))
			}
		}
		if len(c.streams) == 0 {
			c.failLocked(errLeanGoAway)
		}
		c.wake.Broadcast()
	case *http2.PushPromiseFrame:
		return errors.New("loadgen: server sent PUSH_PROMISE although push is disabled")
	}
	return nil
}

// headerBlock decodes a fragment of the header block of stream c.cur (nil:
// a stream given up on, decoded all the same to keep the decoder's table in
// step); at the end of the block, a block that ends the stream ends the
// call.
func (c *leanConn) headerBlock(frag []byte, end bool) error {
	if _, err := c.dec.Write(frag); err != nil {
		return fmt.Errorf("loadgen: header block: %w", err)
	}
	if !end {
		return nil
	}
	if err := c.dec.Close(); err != nil {
		return fmt.Errorf("loadgen: header block: %w", err)
	}
	if st := c.cur; st != nil && c.curEnd {
		c.endLocked(st, nil)
	}
	c.cur = nil
	return nil
}

// field is the hpack decoder's callback: one header field of c.cur.
func (c *leanConn) field(f hpack.HeaderField) {
	st := c.cur
	if st == nil {
		return
	}
	switch f.Name {
	case ":status":
		st.httpStatus, _ = strconv.Atoi(f.Value)
	case "content-type":
		if !strings.HasPrefix(f.Value, "application/grpc") {
			st.badType = f.Value
		}
	case "grpc-status":
		if n, err := strconv.Atoi(f.Value); err == nil && n >= 0 {
			st.grpcStatus = n
		}
	case "grpc-message":
		st.grpcMsg = f.Value
	}
}

// answer returns the reply message of an ended call, or its error.
func (st *leanStream) answer() ([]byte, error) {
	switch {
	case st.err != nil:
		return nil, st.err
	case st.httpStatus != 200:
		return nil, fmt.Errorf("loadgen: HTTP status %d", st.httpStatus)
	case st.badType != "":
		return nil, fmt.Errorf("loadgen: content-type %q is not gRPC's", st.badType)
	case st.grpcStatus < 0:
		return nil, errors.New("loadgen: answer without grpc-status")
	case st.grpcStatus != 0:
		msg := st.grpcMsg
		if m, err := url.PathUnescape(msg); err == nil {
			msg = m
		}
		return nil, status.Error(codes.Code(st.grpcStatus), msg)
	}
	// One length-prefixed, uncompressed message.
	b := st.buf
	if len(b) < 5 {
		return nil, fmt.Errorf("loadgen: reply of %d bytes has no message", len(b))
	}
	if b[0] != 0 {
		return nil, fmt.Errorf("loadgen: reply message compressed (flag %d) although no compression was offered", b[0])
	}
	n := int(b[1])<<24 | int(b[2])<<16 | int(b[3])<<8 | int(b[4])
	if n != len(b)-5 {
		return nil, fmt.Errorf("loadgen: reply of %d bytes holds a message of %d", len(b)-5, n)
	}
	return b[5:], nil
}

// leanClient is one connection slot of the lean client: the connection,
// dialled on first use and again when it fails or the server sends GOAWAY.
type leanClient struct {
	addr       string
	tls        *tls.Config
	timeout    time.Duration
	recvWindow uint32
	token      string // sent as "authorization: Bearer <token>"; "": none

	mu sync.Mutex
	c  *leanConn
}

// conn returns the live connection, dialling one if needed.
func (l *leanClient) conn(ctx context.Context) (*leanConn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.c != nil && l.c.live() {
		return l.c, nil
	}
	c, err := dialLean(ctx, l.addr, l.tls, l.recvWindow, l.timeout)
	if err != nil {
		return nil, err
	}
	l.c = c
	return c, nil
}

func (l *leanClient) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.c != nil {
		l.c.close()
		l.c = nil
	}
}

// leanHeaders encodes the header block of a unary call to path: stateless
// HPACK (static table, literals never indexed), so one block serves every
// stream of every connection. A timeout above 0 is sent as grpc-timeout,
// as grpc-go and Envoy send the call's deadline.
func leanHeaders(authority, path string, tls bool, token string, timeout time.Duration) []byte {
	var b strings.Builder
	e := hpack.NewEncoder(&b)
	scheme := "http"
	if tls {
		scheme = "https"
	}
	fields := []hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: scheme},
		{Name: ":path", Value: path, Sensitive: true},
		{Name: ":authority", Value: authority, Sensitive: true},
		{Name: "content-type", Value: "application/grpc", Sensitive: true},
		{Name: "te", Value: "trailers", Sensitive: true},
		{Name: "user-agent", Value: "sluice-bench", Sensitive: true},
	}
	if timeout > 0 {
		fields = append(fields, hpack.HeaderField{Name: "grpc-timeout", Value: grpcTimeout(timeout), Sensitive: true})
	}
	if token != "" {
		fields = append(fields, hpack.HeaderField{Name: "authorization", Value: "Bearer " + token, Sensitive: true})
	}
	for _, f := range fields {
		e.WriteField(f) // a strings.Builder does not fail
	}
	return []byte(b.String())
}

// grpcTimeout is d as a grpc-timeout value: at most 8 digits and a unit,
// rounded up to the unit.
func grpcTimeout(d time.Duration) string {
	for _, u := range []struct {
		unit string
		size time.Duration
	}{{"u", time.Microsecond}, {"m", time.Millisecond}, {"S", time.Second}, {"M", time.Minute}} {
		if n := (d + u.size - 1) / u.size; n <= 99999999 {
			return strconv.FormatInt(int64(n), 10) + u.unit
		}
	}
	return "99999999H"
}

// leanCall is one worker's unary calls on a leanClient.
type leanCall struct {
	cl    *leanClient
	hdr   []byte
	st    leanStream
	timer *time.Timer
}

func newLeanCall(cl *leanClient, path string) *leanCall {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &leanCall{cl: cl, hdr: leanHeaders(cl.addr, path, cl.tls != nil, cl.token, cl.timeout),
		st: leanStream{done: make(chan struct{}, 1)}, timer: t}
}

// do sends body (a length-prefixed request message) and returns the reply
// message, valid until the next call.
func (lc *leanCall) do(ctx context.Context, body []byte) ([]byte, error) {
	c, err := lc.cl.conn(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.send(&lc.st, lc.hdr, body); err != nil {
		if !errors.Is(err, errLeanGoAway) {
			return nil, err
		}
		// GOAWAY came between choosing the connection and sending: the
		// call was not sent, and goes on a new connection.
		if c, err = lc.cl.conn(ctx); err != nil {
			return nil, err
		}
		if err := c.send(&lc.st, lc.hdr, body); err != nil {
			return nil, err
		}
	}
	if lc.cl.timeout > 0 {
		lc.timer.Reset(lc.cl.timeout)
	}
	select {
	case <-lc.st.done:
		lc.timer.Stop()
		return lc.st.answer()
	case <-lc.timer.C:
		c.cancel(&lc.st)
		return nil, status.Error(codes.DeadlineExceeded, "loadgen: call timed out")
	case <-ctx.Done():
		lc.timer.Stop()
		c.cancel(&lc.st)
		return nil, ctx.Err()
	}
}
