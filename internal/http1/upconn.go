package http1

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/rawio"
)

// upConn is one keep-alive connection to the upstream.
//
// The last bytes of a request (all of it, for a call without a body or
// with a small one) are not written when the request is: they are kept
// (flushLast) and written by the first read of the answer, inside the
// connection's raw read, before it waits. Go's network poller forgets,
// when a read starts, that the connection became readable earlier, so a
// read must try the socket before it waits; written from inside the
// read, the request goes out after that point, no answer can have come
// before it, and the read waits for the answer at once instead of first
// finding nothing (one system call a call fewer).
type upConn struct {
	c        net.Conn
	rc       syscall.RawConn // nil: no file descriptor, the request is written at once
	br       *bufio.Reader   // reads through upReader
	bw       *bufio.Writer   // writes through upWriter
	lastUsed time.Time
	// The header map of the answers readPlainResponse reads, cleared for
	// each: respond copies the answer's headers out of it before the
	// connection goes back to the idle ones.
	h http.Header

	// While an answer's head is read (inHead), the bytes upReader may
	// still read: ErrHeadTooLarge past them.
	inHead   bool
	headLeft int

	hold    bool   // the next write through bw is kept in pending
	pending []byte // the request's last bytes, not yet written
	sent    int    // how much of pending is written

	// The raw read of upReader: its buffer, its result, and itself as a
	// method value.
	p            []byte
	n            int
	rerr, werr   error
	sendThenRead func(uintptr) bool
}

func newUpConn(c net.Conn) *upConn {
	uc := &upConn{c: c, rc: rawConn(c)}
	uc.sendThenRead = uc.sendThenReadFD
	uc.br = bufio.NewReaderSize(upReader{uc}, 4<<10)
	uc.bw = bufio.NewWriterSize(upWriter{uc}, 4<<10)
	return uc
}

// flushLast flushes bw, the end of a request: what it holds is kept for
// the first read of the answer to write (see upConn).
func (uc *upConn) flushLast() error {
	if uc.rc == nil || uc.bw.Buffered() == 0 {
		return uc.bw.Flush()
	}
	uc.hold = true
	err := uc.bw.Flush()
	uc.hold = false
	return err
}

// upWriter is what bw writes to: the connection, or pending.
type upWriter struct{ uc *upConn }

func (w upWriter) Write(p []byte) (int, error) {
	uc := w.uc
	if uc.hold {
		uc.pending = append(uc.pending[:0], p...)
		uc.sent = 0
		return len(p), nil
	}
	return uc.c.Write(p)
}

// upReader is what br reads from: the connection, after writing what is
// pending.
type upReader struct{ uc *upConn }

// errRequestNotSent is a failure writing the kept end of a request: the
// upstream did not get the whole request, as a failed write in
// writeRequest.
type errRequestNotSent struct{ err error }

func (e errRequestNotSent) Error() string { return "http1: writing the request: " + e.err.Error() }
func (e errRequestNotSent) Unwrap() error { return e.err }

// ErrHeadTooLarge is an answer whose status lines and headers do not end
// within the Client's bound (ClientConfig.MaxResponseHeaderBytes).
var ErrHeadTooLarge = errors.New("http1: the upstream's answer headers are larger than the bound")

// endHead lifts the bound of the head of an answer: its body is read
// without one.
func (uc *upConn) endHead() { uc.inHead = false }

func (r upReader) Read(p []byte) (int, error) {
	uc := r.uc
	if !uc.inHead {
		return r.read(p)
	}
	if uc.headLeft <= 0 {
		return 0, ErrHeadTooLarge
	}
	if len(p) > uc.headLeft {
		p = p[:uc.headLeft]
	}
	n, err := r.read(p)
	uc.headLeft -= n
	return n, err
}

func (r upReader) read(p []byte) (int, error) {
	uc := r.uc
	if uc.sent == len(uc.pending) {
		return uc.c.Read(p)
	}
	uc.p, uc.n, uc.rerr, uc.werr = p, 0, nil, nil
	err := uc.rc.Read(uc.sendThenRead)
	n, rerr, werr := uc.n, uc.rerr, uc.werr
	uc.p, uc.rerr, uc.werr = nil, nil, nil
	if werr != nil {
		uc.sent = len(uc.pending)
		return 0, errRequestNotSent{rawio.OpError("write", uc.c, werr)}
	}
	if err != nil {
		return 0, err
	}
	if uc.sent < len(uc.pending) {
		// The socket took part of it: the rest by a write that waits for
		// room, then a plain read.
		rest := uc.pending[uc.sent:]
		uc.sent = len(uc.pending)
		if _, err := uc.c.Write(rest); err != nil {
			return 0, errRequestNotSent{err}
		}
		return uc.c.Read(p)
	}
	if rerr != nil && rerr != io.EOF {
		rerr = rawio.OpError("read", uc.c, rerr)
	}
	return n, rerr
}

// sendThenReadFD is upReader's raw read of the socket fd: it writes what is
// pending, waits, then reads into uc.p. (A method value made once per
// connection: a closure would cost allocations on every call.)
func (uc *upConn) sendThenReadFD(fd uintptr) bool {
	if uc.sent < len(uc.pending) {
		m, err := rawio.Write(fd, uc.pending[uc.sent:])
		if m > 0 {
			uc.sent += m
		}
		switch {
		case err == syscall.EAGAIN:
			return true // the rest goes out by a write that waits
		case err != nil:
			uc.werr = err
			return true
		case uc.sent < len(uc.pending):
			return true // the socket took part: the rest by a write that waits
		}
		return false // all out: wait for the answer without reading first
	}
	m, done, err := rawio.TryRead(fd, uc.p)
	uc.n, uc.rerr = m, err
	return done
}

// notSent reports whether err is a failure to write the kept end of a
// request.
func notSent(err error) bool {
	var e errRequestNotSent
	return errors.As(err, &e)
}
