// Package rawio reads and writes non-blocking sockets with system calls
// the Go scheduler is not told of (on Linux; see sys_linux.go for why):
// Read and Write for code that holds a socket's descriptor inside its
// syscall.RawConn (the gateway's server loop and upstream connections),
// and Conn for a net.Conn whose reads and writes should go that way (the
// Redis store's connections, with redis.Config.RawIO).
//
// One setting turns raw calls off everywhere: SLUICE_RAW_IO=0 (or false,
// off, no) in the environment, read once at start. Read and Write are then
// the calls the scheduler is told of, and Conn returns its connection as
// it is. What raw calls trade: while one is in the kernel, the runtime can
// neither preempt it nor hand its processor to another thread.
package rawio

import (
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
)

// Enabled reports whether raw system calls are made: on Linux, unless
// SLUICE_RAW_IO turns them off.
func Enabled() bool { return rawCalls }

// enabledBy reports whether the value of SLUICE_RAW_IO leaves raw calls on:
// anything but 0, false, off and no (any case).
func enabledBy(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "0", "false", "off", "no":
		return false
	}
	return true
}

// Read is one read(2) of the non-blocking fd: EAGAIN when there is nothing
// to read, 0 and nil at the end of the stream.
func Read(fd uintptr, p []byte) (int, error) { return again(sysRead, fd, p) }

// Write is one write(2) to the non-blocking fd: it writes what the socket
// takes now, and EAGAIN when it takes nothing.
func Write(fd uintptr, p []byte) (int, error) { return again(sysWrite, fd, p) }

// TryRead is the read of a syscall.RawConn's callback: done is false
// when there is nothing to read yet (the callback returns false, to
// wait); else n and err are what Read gave, with io.EOF at the end of the
// stream.
func TryRead(fd uintptr, p []byte) (n int, done bool, err error) {
	n, err = Read(fd, p)
	switch {
	case err == syscall.EAGAIN:
		return 0, false, nil
	case err == nil && n == 0:
		err = io.EOF
	}
	return n, true, err
}

// again makes call until a signal does not interrupt it.
func again(call func(uintptr, []byte) (int, error), fd uintptr, p []byte) (int, error) {
	for {
		n, err := call(fd, p)
		if err == syscall.EINTR {
			continue
		}
		return max(n, 0), err
	}
}

// RawConn is c's syscall.RawConn; nil when c has no file descriptor.
func RawConn(c net.Conn) syscall.RawConn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// Conn is c with its Read and Write made by Read and Write inside its
// syscall.RawConn, so that they wait, and keep c's deadlines, as c's own
// do. Where raw system calls are not used (systems other than Linux), or
// c has no descriptor, it is c.
func Conn(c net.Conn) net.Conn {
	if !rawCalls {
		return c
	}
	rc := RawConn(c)
	if rc == nil {
		return c
	}
	rw := &conn{Conn: c, rc: rc}
	rw.readFn, rw.writeFn = rw.readFD, rw.writeFD
	return rw
}

// conn is Conn's net.Conn. Reads and writes may run at once, each under
// its own lock; the callbacks are method values made once, so that a
// call costs no allocation.
type conn struct {
	net.Conn
	rc syscall.RawConn

	rmu    sync.Mutex
	rp     []byte
	rn     int
	rerr   error
	readFn func(uintptr) bool

	wmu     sync.Mutex
	wp      []byte
	wn      int
	werr    error
	writeFn func(uintptr) bool
}

func (c *conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.rp, c.rn, c.rerr = p, 0, nil
	err := c.rc.Read(c.readFn) // its errors (deadline, closed) are net.OpErrors already
	n, rerr := c.rn, c.rerr
	c.rp, c.rerr = nil, nil
	switch {
	case err != nil:
		return n, err
	case rerr == io.EOF:
		return 0, io.EOF
	case rerr != nil:
		return n, OpError("read", c.Conn, rerr)
	}
	return n, nil
}

func (c *conn) readFD(fd uintptr) bool {
	n, done, err := TryRead(fd, c.rp)
	c.rn, c.rerr = n, err
	return done // false: wait until readable, then again
}

func (c *conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wp, c.wn, c.werr = p, 0, nil
	err := c.rc.Write(c.writeFn)
	n, werr := c.wn, c.werr
	c.wp, c.werr = nil, nil
	switch {
	case err != nil:
		return n, err
	case werr != nil:
		return n, OpError("write", c.Conn, werr)
	}
	return n, nil
}

// writeFD writes all of c.wp, waiting for room as often as it takes.
func (c *conn) writeFD(fd uintptr) bool {
	for c.wn < len(c.wp) {
		n, err := Write(fd, c.wp[c.wn:])
		c.wn += n
		switch {
		case err == syscall.EAGAIN:
			return false // wait until writable, then again
		case err != nil:
			c.werr = err
			return true
		}
	}
	return true
}

// OpError is the error of a read or write (op) on c that failed with the
// system call error errno, as c's own Read and Write would give it.
func OpError(op string, c net.Conn, errno error) error {
	return &net.OpError{Op: op, Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError(op, errno)}
}
