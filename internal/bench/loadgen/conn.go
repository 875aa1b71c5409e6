package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"
)

// Conn is one worker's keep-alive HTTP/1.1 connection: the request is
// written with one write and the answer read back on the calling
// goroutine, as wrk does.
//
// net/http's client hands every call between the caller's goroutine and
// the connection's read and write goroutines; on a small machine those
// wake-ups cost more than the call itself and showed as a millisecond tail
// that was the generator's, not the server's (bench/http.sh at 10,000/s: a
// bare handler's p99 went from 2.3–3.3 ms to 0.4–0.6 ms). Conn is only for
// load generation: it speaks to one http:// host, sends the bytes it is
// given and reads the answer with http.ReadResponse, which handles
// Content-Length, chunked bodies and Connection: close.
type Conn struct {
	addr    string
	timeout time.Duration
	tls     *tls.Config // nil: plain TCP
	c       net.Conn
	br      *bufio.Reader
	body    bytes.Buffer
}

// NewConn returns a Conn to the host of the http:// URL target; it dials on
// first use. Each call must finish within timeout (0: no limit).
func NewConn(target string, timeout time.Duration) (*Conn, error) {
	_, addr, err := targetAddr(target, "http", "80")
	if err != nil {
		return nil, err
	}
	return &Conn{addr: addr, timeout: timeout}, nil
}

// NewConnTLS returns a Conn to the host of the https:// URL target, over
// TLS with cfg (nil: the system's CAs, no client certificate).
func NewConnTLS(target string, timeout time.Duration, cfg *tls.Config) (*Conn, error) {
	u, addr, err := targetAddr(target, "https", "443")
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		cfg = &tls.Config{}
	}
	cfg = cfg.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName = u.Hostname()
	}
	cfg.NextProtos = []string{"http/1.1"}
	return &Conn{addr: addr, timeout: timeout, tls: cfg}, nil
}

// targetAddr parses target, a scheme://host[:port] URL, and returns it
// with the address to dial (port when it names none).
func targetAddr(target, scheme, port string) (*url.URL, string, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, "", fmt.Errorf("loadgen: target: %w", err)
	}
	if u.Scheme != scheme || u.Host == "" {
		return nil, "", fmt.Errorf("loadgen: target must be an %s://host:port URL, got %q", scheme, target)
	}
	if u.Port() == "" {
		return u, net.JoinHostPort(u.Hostname(), port), nil
	}
	return u, u.Host, nil
}

// Do writes req, a complete HTTP/1.1 request, and reads the answer. It
// returns the status and the body, which is valid until the next Do. A
// connection that failed or that the server closed is dialled again on the
// next Do; a request is never sent twice.
func (c *Conn) Do(ctx context.Context, req []byte) (status int, body []byte, err error) {
	status, body, err = c.do(ctx, req)
	if err != nil {
		c.Close()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
	}
	return status, body, err
}

func (c *Conn) do(ctx context.Context, req []byte) (int, []byte, error) {
	if c.c == nil {
		d := net.Dialer{Timeout: 5 * time.Second}
		nc, err := d.DialContext(ctx, "tcp", c.addr)
		if err != nil {
			return 0, nil, err
		}
		if c.tls != nil {
			tc := tls.Client(nc, c.tls)
			if err := tc.HandshakeContext(ctx); err != nil {
				nc.Close()
				return 0, nil, err
			}
			nc = tc
		}
		c.c = nc
		if c.br == nil {
			c.br = bufio.NewReaderSize(nc, 16<<10)
		} else {
			c.br.Reset(nc)
		}
	}
	deadline, ok := ctx.Deadline()
	if c.timeout > 0 {
		if d := time.Now().Add(c.timeout); !ok || d.Before(deadline) {
			deadline, ok = d, true
		}
	}
	if ok {
		if err := c.c.SetDeadline(deadline); err != nil {
			return 0, nil, err
		}
	}
	if _, err := c.c.Write(req); err != nil {
		return 0, nil, err
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // closed before answering
		}
		return 0, nil, err
	}
	c.body.Reset()
	_, err = c.body.ReadFrom(io.LimitReader(resp.Body, maxBody))
	if err == nil && c.body.Len() == maxBody {
		var one [1]byte
		if n, _ := resp.Body.Read(one[:]); n > 0 {
			err = fmt.Errorf("loadgen: answer body over %d bytes", maxBody)
		}
	}
	resp.Body.Close()
	if err != nil {
		return 0, nil, err
	}
	if resp.Close {
		c.Close()
	}
	return resp.StatusCode, c.body.Bytes(), nil
}

// maxBody is the largest answer body Conn reads.
const maxBody = 1 << 20

// Close closes the connection; the next Do dials again.
func (c *Conn) Close() {
	if c.c != nil {
		c.c.Close()
		c.c = nil
	}
}
