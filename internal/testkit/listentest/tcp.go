package listentest

import (
	mrand "math/rand/v2"
	"net"
	"strconv"
	"sync"
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
// server a test starts to listen on. It is drawn at random from
// 20000–32767, below the kernel's ephemeral range (32768–60999 by
// default): no outgoing connection and no listener on port 0 — what
// every other test and process on the machine makes — can take it
// between this call and the server's listen, and this process never
// hands it out twice. A port from port 0, as before, was in that range,
// and under a loaded test run another test's connection took one now
// and then ("address already in use").
func FreePort(t testing.TB) int {
	t.Helper()
	return FreePortIn(t, 20000, 32767, nil)
}

var handed sync.Map // int → struct{}: the ports FreePortIn gave

// FreePortIn is FreePort drawing from lo–hi, for a port that also needs
// more (ok, when not nil, says whether a drawn port will do: a Redis
// Cluster node's bus port, say).
func FreePortIn(t testing.TB, lo, hi int, ok func(port int) bool) int {
	t.Helper()
	for range 200 {
		port := lo + mrand.IntN(hi-lo+1)
		if _, taken := handed.LoadOrStore(port, struct{}{}); taken {
			continue
		}
		if !Bindable(port) || (ok != nil && !ok(port)) {
			continue
		}
		return port
	}
	t.Fatalf("listentest: no free loopback port in %d–%d", lo, hi)
	return 0
}

// Bindable says whether 127.0.0.1:port can be listened on now.
func Bindable(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// FreeAddr is FreePort's port on loopback, 127.0.0.1:port.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(FreePort(t))
}
