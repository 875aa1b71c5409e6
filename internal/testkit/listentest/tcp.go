package listentest

import (
	"net"
	"strconv"
	"testing"
)

// ServeTCP listens on a loopback port until the test ends, gives each
// connection it accepts to serve in a goroutine of its own, and returns
// the address: a raw peer for tests of what a client does with whatever
// bytes a server sends, or none.
func ServeTCP(t testing.TB, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return ln.Addr().String()
}

// FreePort returns a loopback TCP port that was free a moment ago, for a
// server a test starts to listen on.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// FreeAddr is FreePort's port on loopback, 127.0.0.1:port.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(FreePort(t))
}
