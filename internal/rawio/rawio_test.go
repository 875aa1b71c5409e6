package rawio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// pair is a connected loopback TCP pair: a wrapped by Conn, b plain.
func pair(t *testing.T) (a, b net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b = <-accepted
	if b == nil {
		t.Fatal("accept failed")
	}
	a = Conn(c)
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func TestConnIsRawOnLinux(t *testing.T) {
	a, _ := pair(t)
	if _, ok := a.(*conn); ok != rawCalls {
		t.Fatalf("Conn gave %T; raw system calls here: %v", a, rawCalls)
	}
}

// TestConnMovesBytes: 16 MiB each way at once, more than the sockets hold,
// so that writes find the socket full and wait, and reads find it empty
// and wait; every byte arrives in order.
func TestConnMovesBytes(t *testing.T) {
	a, b := pair(t)
	big := make([]byte, 16<<20)
	for i := range big {
		big[i] = byte(i*7 + i>>11)
	}
	var wg sync.WaitGroup
	check := func(name string, w io.Writer, r io.Reader) {
		defer wg.Done()
		errs := make(chan error, 1)
		go func() {
			_, err := w.Write(big)
			errs <- err
		}()
		got, err := io.ReadAll(io.LimitReader(r, int64(len(big))))
		if err != nil {
			t.Errorf("%s: read: %v after %d bytes", name, err, len(got))
		}
		if err := <-errs; err != nil {
			t.Errorf("%s: write: %v", name, err)
		}
		if !bytes.Equal(got, big) {
			t.Errorf("%s: %d bytes read, not the %d written", name, len(got), len(big))
		}
	}
	wg.Add(2)
	go check("wrapped to plain", a, b)
	go check("plain to wrapped", b, a)
	wg.Wait()
}

// TestConnDeadlines: the deadlines of the connection hold for its reads
// and writes, as net.Conn's own: a timeout error that says so.
func TestConnDeadlines(t *testing.T) {
	a, _ := pair(t)
	a.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	start := time.Now()
	_, err := a.Read(make([]byte, 10))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
	if took := time.Since(start); took < 40*time.Millisecond || took > 2*time.Second {
		t.Fatalf("read past a 50 ms deadline returned after %s", took)
	}
	// Nobody reads b: writes fill the sockets, then wait for the deadline.
	a.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	n, err := a.Write(make([]byte, 64<<20))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write past the deadline: %d bytes, %v, want a timeout", n, err)
	}
	if n <= 0 || n >= 64<<20 {
		t.Fatalf("write past the deadline reports %d bytes written, want what the sockets took", n)
	}
	a.SetDeadline(time.Time{})
	a.SetWriteDeadline(time.Now().Add(-time.Second))
	if _, err := a.Write([]byte("x")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write with a deadline passed: %v, want a timeout even with room in the socket", err)
	}
}

// TestConnEnds: the peer's close is io.EOF; a read or write on a closed
// connection is net.ErrClosed; a reset peer is an error, not a short read
// taken for the end.
func TestConnEnds(t *testing.T) {
	a, b := pair(t)
	b.Write([]byte("last"))
	b.Close()
	got, err := io.ReadAll(a)
	if err != nil || string(got) != "last" {
		t.Fatalf("after the peer's close: %q, %v; want \"last\" then io.EOF", got, err)
	}
	if n, err := a.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("read after the end: %d, %v; want 0, io.EOF", n, err)
	}
	a.Close()
	if _, err := a.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read on a closed connection: %v, want net.ErrClosed", err)
	}
	if _, err := a.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write on a closed connection: %v, want net.ErrClosed", err)
	}

	c, d := pair(t)
	d.(*net.TCPConn).SetLinger(0)
	d.Close() // a reset
	time.Sleep(50 * time.Millisecond)
	var werr error
	for range 100 {
		if _, werr = c.Write([]byte("to a reset peer")); werr != nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if werr == nil {
		t.Fatal("writes to a reset peer kept succeeding")
	}
	var op *net.OpError
	if !errors.As(werr, &op) || op.Op != "write" {
		t.Fatalf("write to a reset peer: %v, want a *net.OpError of write", werr)
	}
}

// TestEnabledBy: SLUICE_RAW_IO turns raw calls off with 0, false, off or
// no, in any case; anything else (unset included) leaves them on.
func TestEnabledBy(t *testing.T) {
	for v, want := range map[string]bool{"": true, "1": true, "on": true, "0": false, "false": false, "OFF": false, " no ": false} {
		if got := enabledBy(v); got != want {
			t.Errorf("enabledBy(%q) = %v, want %v", v, got, want)
		}
	}
}
