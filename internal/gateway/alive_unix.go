//go:build unix

package gateway

import (
	"net"
	"syscall"
)

// connAlive reports whether c, an idle connection, is still open: a
// non-blocking peek finds nothing to read (EAGAIN). EOF, an error or
// unexpected bytes from an idle upstream all mean it is not to be used.
func connAlive(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		alive = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
		return true
	})
	return err == nil && alive
}
