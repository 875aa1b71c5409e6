// Package listen is how sluice's listeners face the network: TLS whose
// certificate, key and client CAs are reloaded when their files change
// (TLS), bearer tokens (Tokens), and the limits that keep slow or idle
// clients from holding connections (Limits, MinBodyRate), for the HTTP
// listeners and the gRPC one alike.
package listen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// Limits bound what a client may hold of a listener. Every field's zero
// value takes its default (DefaultLimits); durations are at least a
// millisecond.
type Limits struct {
	// ReadHeaderTimeout bounds the TLS handshake and the reading of a
	// request's line and headers, from the connection's first byte (or,
	// on a kept-alive connection, from the request's first byte). For
	// gRPC it bounds the connection's setup (TLS and the HTTP/2 preface).
	// Default 5 s.
	ReadHeaderTimeout time.Duration
	// BodyTimeout bounds the reading of a whole request, body included,
	// from its first byte. For gRPC it is the deadline of a call that has
	// none of its own or a later one (a health Watch is exempt). Not used
	// by listeners that stream bodies (the gateway's proxy: MinBodyRate).
	// Default 10 s.
	BodyTimeout time.Duration
	// IdleTimeout closes a kept-alive connection after this long without
	// a request; for gRPC, a connection without a call in flight.
	// Default 120 s.
	IdleTimeout time.Duration
	// MaxHeaderBytes caps the size of a request's headers (the request
	// line included); net/http adds 4 KiB of slack, past which a request
	// is answered 431. For gRPC, the size of a call's metadata. Default
	// 64 KiB.
	MaxHeaderBytes int
}

// DefaultLimits returns the defaults.
func DefaultLimits() Limits {
	return Limits{ReadHeaderTimeout: 5 * time.Second, BodyTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = d.ReadHeaderTimeout
	}
	if l.BodyTimeout <= 0 {
		l.BodyTimeout = d.BodyTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = d.IdleTimeout
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = d.MaxHeaderBytes
	}
	return l
}

// Server returns an http.Server for h with the limits. When streaming is
// true the request body has no deadline (wrap h with MinBodyRate); else
// it must arrive within BodyTimeout. Responses have no deadline: a
// decision is written at once, and the gateway's downloads take as long
// as they take. errLog receives the server's own errors (a refused TLS
// handshake, say) at level debug.
func (l Limits) Server(h http.Handler, streaming bool, errLog *slog.Logger) *http.Server {
	l = l.withDefaults()
	s := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
	}
	if !streaming {
		s.ReadTimeout = l.BodyTimeout
	}
	if errLog != nil {
		s.ErrorLog = slog.NewLogLogger(errLog.Handler(), slog.LevelDebug)
	}
	return s
}

// GRPCOptions returns the server options of the limits, of tokens (when
// set, every call but the health service's needs metadata
// "authorization: Bearer <token>", else it fails with
// codes.Unauthenticated before its message is read) and of tls (nil:
// plain TCP).
//
// A connection must be set up within ReadHeaderTimeout and is closed
// after IdleTimeout without a call; a call's metadata is at most
// MaxHeaderBytes; a call whose client set no deadline, or one later than
// BodyTimeout, gets BodyTimeout, so a client that trickles its message
// cannot hold the call open (grpc.health.v1.Health/Watch, a stream meant
// to stay open, is exempt). At most MaxConcurrentStreams calls run at
// once on one connection; more wait in the client.
func GRPCOptions(l Limits, tokens Tokens, tls *TLS) []grpc.ServerOption {
	l = l.withDefaults()
	opts := []grpc.ServerOption{
		grpc.ConnectionTimeout(l.ReadHeaderTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: l.IdleTimeout}),
		grpc.MaxHeaderListSize(uint32(l.MaxHeaderBytes)),
		grpc.MaxConcurrentStreams(MaxConcurrentStreams),
		grpc.InTapHandle(func(ctx context.Context, info *tap.Info) (context.Context, error) {
			if strings.HasPrefix(info.FullMethodName, healthService) {
				return ctx, nil
			}
			if tokens.Set() {
				v := info.Header.Get("authorization")
				if len(v) != 1 || !tokens.Valid(v[0]) {
					return nil, status.Errorf(codes.Unauthenticated, "listen: metadata authorization: want \"Bearer <token>\" with a token of the server's %s", tokens.flag)
				}
			}
			if d, ok := ctx.Deadline(); ok && time.Until(d) <= l.BodyTimeout {
				return ctx, nil
			}
			// The stream's context is cancelled when the call ends, which
			// ends this one and stops its timer.
			ctx, cancel := context.WithTimeout(ctx, l.BodyTimeout)
			context.AfterFunc(ctx, cancel)
			return ctx, nil
		}),
	}
	if tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tls.Config())))
	}
	return opts
}

// MaxConcurrentStreams is the number of calls one gRPC connection may
// have in flight at once.
const MaxConcurrentStreams = 1024

// healthService starts the methods of the gRPC health service, which stay
// open without a token (as /healthz and /readyz do).
const healthService = "/grpc.health.v1.Health/"

// ErrSlowBody is the error a request body read through MinBodyRate
// returns when it arrives too slowly.
var ErrSlowBody = errors.New("listen: the request body arrived too slowly")

// MinBodyRate returns h with a floor under the speed of request bodies,
// for a server that streams them (no BodyTimeout): once grace has passed
// since the body's first read, it must have arrived at rate bytes a
// second on average, counting only the time spent waiting for the client
// (not the time the handler takes between reads, so a slow upstream does
// not count against the client). A body that falls behind fails its read
// with an error wrapping ErrSlowBody and the connection is closed. A body
// the handler does not read (a call answered 429 from its headers) is
// given grace to be drained before the connection is closed.
func MinBodyRate(h http.Handler, rate int64, grace time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			h.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		// Bounds what the server drains of a body nobody reads.
		rc.SetReadDeadline(time.Now().Add(grace)) //nolint:errcheck // not every connection has deadlines
		body := &rateReader{r: r.Body, rc: rc, rate: rate, grace: grace}
		r2 := r.WithContext(context.WithValue(r.Context(), rateReaderKey{}, body)) // the server keeps r: its Body must stay the server's
		r2.Body = body
		h.ServeHTTP(w, r2)
	})
}

// rateReader is a request body read under MinBodyRate.
type rateReader struct {
	r      io.ReadCloser
	rc     *http.ResponseController
	rate   int64
	grace  time.Duration
	read   int64         // bytes read so far
	waited time.Duration // time spent in Read so far
	err    error         // the sticky ErrSlowBody
	slowed atomic.Bool   // err is set (for BodyTooSlow, on another goroutine)
}

// BodyTooSlow reports whether r's body, read through MinBodyRate, failed
// for arriving too slowly. A proxy whose upstream call failed asks it to
// tell the client's fault (408) from the upstream's: the failed read
// also cancels the request's context, which can reach the proxy first.
func BodyTooSlow(r *http.Request) bool {
	b, ok := r.Context().Value(rateReaderKey{}).(*rateReader)
	return ok && b.slowed.Load()
}

// rateReaderKey keys a request's rateReader in its context, where it
// survives the copies a proxy makes of the request (and of its body).
type rateReaderKey struct{}

func (b *rateReader) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	budget := b.grace + time.Duration(float64(b.read)/float64(b.rate)*float64(time.Second)) - b.waited
	if budget <= 0 {
		return 0, b.slow()
	}
	start := time.Now()
	if err := b.rc.SetReadDeadline(start.Add(budget)); err != nil {
		return b.r.Read(p) // no deadlines on this connection (HTTP/2 without support): read as is
	}
	n, err := b.r.Read(p)
	b.waited += time.Since(start)
	b.read += int64(n)
	switch {
	case err == io.EOF:
		// The server reads on in the background to see the client
		// leave; the deadline must not cut that.
		b.rc.SetReadDeadline(time.Time{}) //nolint:errcheck
	case errors.Is(err, os.ErrDeadlineExceeded):
		return n, b.slow()
	}
	return n, err
}

func (b *rateReader) slow() error {
	b.err = fmt.Errorf("%w: %d bytes in %s, under the %d bytes/s after %s the server requires",
		ErrSlowBody, b.read, b.waited.Round(time.Millisecond), b.rate, b.grace)
	b.slowed.Store(true)
	return b.err
}

func (b *rateReader) Close() error { return b.r.Close() }
