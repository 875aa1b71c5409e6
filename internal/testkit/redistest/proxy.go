package redistest

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy on a loopback port in front of a server. In
// blackhole mode it keeps accepting connections and reading what clients
// send, but forwards nothing and answers nothing: the half-open, silent
// network failure that only a deadline detects.
type Proxy struct {
	ln        net.Listener
	target    string
	blackhole atomic.Bool
	delay     atomic.Int64 // ns each reply is held (SetReplyDelay)
	mu        sync.Mutex
	conns     map[net.Conn]struct{}
	wg        sync.WaitGroup
}

// StartProxy starts a proxy to target, stopped when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Blackhole turns blackhole mode on or off. Turning it on also silences the
// connections already open; turning it off lets new connections through
// (old ones stay silent, as after a network partition).
func (p *Proxy) Blackhole(on bool) { p.blackhole.Store(on) }

// SetReplyDelay holds every chunk the server sends for d before it is
// forwarded to the client (0: at once): a slow network on the way back,
// so that the server has acted long before its client learns the answer.
func (p *Proxy) SetReplyDelay(d time.Duration) { p.delay.Store(int64(d)) }

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(c)
		}()
	}
}

func (p *Proxy) serve(c net.Conn) {
	if p.blackhole.Load() {
		io.Copy(io.Discard, c) // read forever, answer nothing
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(up) {
		c.Close()
		return
	}
	// Forward both ways until blackhole mode, then swallow.
	pipe := func(dst, src net.Conn, reply bool) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if d := p.delay.Load(); reply && n > 0 && d > 0 {
				time.Sleep(time.Duration(d))
			}
			if n > 0 && !p.blackhole.Load() {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	done := make(chan struct{}, 2)
	go func() { pipe(up, c, false); done <- struct{}{} }()
	go func() { pipe(c, up, true); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	<-done
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}
