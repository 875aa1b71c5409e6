package listentest

import (
	"net"
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
