package listentest

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// Trickled is what became of a connection Trickle opened.
type Trickled struct {
	Open   bool          // still open when the limit passed
	Answer string        // what the server wrote before it closed the connection
	After  time.Duration // how long after the head the connection was closed
}

// Trickle dials addr, sends head (a request line and headers, say, the
// last of them perhaps unfinished) and then "x" one byte every gap, n
// bytes at most, and returns at once. The channel gets what became of the
// connection once the server closed it, or once limit passed after the
// head with the connection still open; the connection is closed then.
func Trickle(t testing.TB, addr, head string, n int, gap, limit time.Duration) <-chan Trickled {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("connection to %s: %v", addr, err)
	}
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	out := make(chan Trickled, 1)
	go func() {
		defer c.Close()
		stop := make(chan struct{})
		defer close(stop)
		if n > 0 {
			go func() {
				tk := time.NewTicker(gap)
				defer tk.Stop()
				for range n {
					select {
					case <-stop:
						return
					case <-tk.C:
						if _, err := c.Write([]byte("x")); err != nil {
							return
						}
					}
				}
			}()
		}
		c.SetReadDeadline(t0.Add(limit)) //nolint:errcheck
		b, err := io.ReadAll(bufio.NewReader(c))
		if errors.Is(err, os.ErrDeadlineExceeded) {
			out <- Trickled{Open: true}
			return
		}
		out <- Trickled{Answer: string(b), After: time.Since(t0)}
	}()
	return out
}
