//go:build unix

package http1

import (
	"errors"
	"net"
	"os"
	"syscall"

	"github.com/sluicehq/sluice/internal/rawio"
)

// connAlive reports whether c, an idle connection, is still open with
// nothing to read: a non-blocking peek at its socket finds nothing
// (EAGAIN). EOF, an error or bytes from an idle upstream all mean it is
// not to be used. The peek is made in the socket's Control, not its
// Read: it neither waits nor minds a read deadline passed.
func connAlive(c net.Conn) bool {
	if _, ok := c.(syscall.Conn); !ok {
		return true
	}
	rc := rawConn(c)
	if rc == nil {
		return false
	}
	alive := false
	var b [1]byte
	err := rc.Control(func(fd uintptr) {
		for {
			_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			if err == syscall.EINTR {
				continue
			}
			alive = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
			return
		}
	})
	return err == nil && alive
}

// peekState is what a peek at a socket found.
type peekState int

const (
	peekEmpty  peekState = iota // nothing to read yet
	peekData                    // a byte, left to be read
	peekClosed                  // the end of the stream, or an error
)

// peek looks at the next byte of rc's socket without taking it; with
// wait, it waits for a byte or the end rather than find nothing.
func peek(rc syscall.RawConn, wait bool) (peekState, error) {
	st := peekEmpty
	var b [1]byte
	err := rc.Read(func(fd uintptr) bool {
		for {
			n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			switch {
			case err == syscall.EINTR:
				continue
			case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
				return !wait
			case err != nil || n == 0:
				st = peekClosed
			default:
				st = peekData
			}
			return true
		}
	})
	return st, err
}

// rawConn is c's raw connection, for the server loop's reads (see
// srvConn.serve); nil when c has no file descriptor.
func rawConn(c net.Conn) syscall.RawConn { return rawio.RawConn(c) }

// watchFile is a second descriptor of c's socket, registered with the
// network poller on its own: the watch on a client going away reads
// through it while the loop holds c's reads (see srvConn.watch).
func watchFile(c net.Conn) (*os.File, error) {
	rc := rawConn(c)
	if rc == nil {
		return nil, errors.New("http1: no file descriptor")
	}
	var (
		fd   int
		derr error
	)
	if err := rc.Control(func(s uintptr) {
		syscall.ForkLock.RLock()
		defer syscall.ForkLock.RUnlock()
		if fd, derr = syscall.Dup(int(s)); derr == nil {
			syscall.CloseOnExec(fd)
		}
	}); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	// The copy shares the socket's non-blocking mode: os.NewFile makes
	// it pollable, so its read deadline works.
	return os.NewFile(uintptr(fd), "client"), nil
}

// waitGone waits until the client of f's socket closes or resets it
// (true) or sends a byte, which stays to be read (false); an error of f's
// own (its deadline, Close) ends the wait with false.
func waitGone(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	st, err := peek(rc, true)
	return err == nil && st == peekClosed
}
