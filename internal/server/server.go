// Package server is sluice's data plane (--listen, docs/api.md): the HTTP
// decision API POST /ratelimit/check, and GET /healthz and GET /readyz.
// Other handlers (/metrics) are added with Server.Handle.
//
// The check handler is on the hot path: it reads the body into a pooled
// buffer, parses it with a strict hand-written tokenizer and writes the
// answer by hand, so that a decision costs a few allocations.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"

	"github.com/sluicehq/sluice/headers"
	"github.com/sluicehq/sluice/identity"
	"github.com/sluicehq/sluice/internal/jsonhttp"
	"github.com/sluicehq/sluice/internal/ratelog"
	"github.com/sluicehq/sluice/limiter"
)

// Error codes of the JSON error body {"error":"<code>","message":"..."}.
const (
	CodeInvalidRequest  = "invalid_request"   // 400
	CodePayloadTooLarge = "payload_too_large" // 413
	CodeUnavailable     = "unavailable"       // 503: the limiter could not decide
	CodeInternal        = "internal"          // 500
)

// DefaultMaxBody is the default Config.MaxBody.
const DefaultMaxBody = 64 << 10

// Config configures a Server. A zero field takes its default.
type Config struct {
	// MaxBody is the largest check request body, in bytes; a larger one is
	// answered 413. Default 64 KiB, far above any valid request (whose
	// fields are bounded to a few KiB).
	MaxBody int64

	// Ready reports readiness for GET /readyz: 200 {"status":"ready",
	// ...detail} when ok, else 503 {"status":"not_ready", ...detail}. The
	// detail keys (e.g. "rules_revision", "store") are the caller's. Default:
	// always ready, with no detail.
	Ready func() (ok bool, detail map[string]any)

	// Logger receives the errors the limiter returns. Default: discard.
	Logger *slog.Logger

	// OnDecision, when set, is told every decision the check API makes
	// (metrics). It runs on the request's goroutine: it must be cheap and
	// must not keep d.
	OnDecision func(d *limiter.Decision)

	// OnError, when set, is told the status of every error answer
	// (metrics): 400, 404, 409, 413, 415, 500, 503.
	OnError func(status int)

	// OnDenied, when set, is told every denial by a rule the check API
	// makes, with the limiter and the call denied (the console's top list,
	// console.Feed.Denied). It runs on the request's goroutine after
	// OnDecision: it must be cheap and must keep neither argument.
	OnDenied func(lim *limiter.Limiter, d *limiter.Decision, req *limiter.Request)

	// JSONDecoder reads the bodies of the check and reserve APIs:
	// DecoderFast (the default, "" too), the hand-written tokenizer of
	// package flatjson, or DecoderStd, encoding/json's Decoder held to the
	// same rules — the fallback, should the tokenizer be in doubt.
	JSONDecoder string
}

// The choices of Config.JSONDecoder (`sluice serve --json-decoder`).
const (
	DecoderFast = "fast"
	DecoderStd  = "std"
)

// DefaultConfig returns the default configuration.
func DefaultConfig() Config {
	return Config{
		MaxBody: DefaultMaxBody,
		Logger:  slog.New(slog.DiscardHandler),
	}
}

// Validate reports whether c is usable; zero fields count as their default.
func (c Config) Validate() error {
	if c.MaxBody < 0 {
		return errors.New("server: max body must not be negative")
	}
	switch c.JSONDecoder {
	case "", DecoderFast, DecoderStd:
	default:
		return fmt.Errorf("server: JSON decoder %q: want %s or %s", c.JSONDecoder, DecoderFast, DecoderStd)
	}
	return nil
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MaxBody <= 0 {
		c.MaxBody = d.MaxBody
	}
	if c.Logger == nil {
		c.Logger = d.Logger
	}
	return c
}

// Server is the data-plane HTTP handler. Its routes are fixed at New; more
// can be added with Handle before it serves. Safe for concurrent use.
type Server struct {
	l   *limiter.Limiter
	cfg Config
	mux *http.ServeMux

	failures ratelog.Limiter // limiter errors: one line a second
	stdJSON  bool            // Config.JSONDecoder is DecoderStd
}

// New returns a server deciding calls with l.
func New(l *limiter.Limiter, cfg Config) *Server {
	s := &Server{l: l, cfg: cfg.withDefaults(), mux: http.NewServeMux(), stdJSON: cfg.JSONDecoder == DecoderStd}
	s.mux.Handle("POST /ratelimit/check", s.handler(s.check))
	s.mux.Handle("POST /ratelimit/reserve", s.handler(s.reserve))
	s.mux.Handle("GET /healthz", s.handler(s.healthz))
	s.mux.Handle("GET /readyz", s.handler(s.readyz))
	// Other methods: a JSON 405, as every other error (not net/http's text).
	s.mux.Handle("/ratelimit/check", s.handler(methodNotAllowed("POST")))
	s.mux.Handle("/healthz", s.handler(methodNotAllowed("GET", "HEAD")))
	s.mux.Handle("/readyz", s.handler(methodNotAllowed("GET", "HEAD")))
	return s
}

// Handle registers h for pattern (a net/http ServeMux pattern, e.g.
// "GET /metrics") next to the decision API. Call it before serving.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mux.ServeHTTP(w, r)
}

// handlerFunc is a handler that returns its error instead of writing it.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// handler adapts fn to net/http: its error is rendered by writeError.
func (s *Server) handler(fn handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := fn(w, r); err != nil {
			s.writeError(w, r, err)
		}
	})
}

// writeError is the one place errors become HTTP answers: an *jsonhttp.APIError as
// itself, anything else as a 500 that is logged.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var ae *jsonhttp.APIError
	if !errors.As(err, &ae) {
		s.cfg.Logger.Error("server: internal error", "path", r.URL.Path, "err", err)
		ae = &jsonhttp.APIError{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error"}
	}
	if s.cfg.OnError != nil {
		s.cfg.OnError(ae.Status)
	}
	ae.Write(w)
}

// buffers is the pooled working memory of one check.
type buffers struct {
	body []byte // the request body
	esc  []byte // its escaped strings, decoded
	out  []byte // the answer
}

var bufPool = sync.Pool{New: func() any {
	return &buffers{body: make([]byte, 0, 1024), esc: make([]byte, 0, 256), out: make([]byte, 0, 512)}
}}

// maxPooled bounds the buffers kept in bufPool, so that one large body does
// not pin its memory.
const maxPooled = 64 << 10

func (b *buffers) release() {
	if cap(b.body) > maxPooled || cap(b.esc) > maxPooled || cap(b.out) > maxPooled {
		return
	}
	bufPool.Put(b)
}

// check is POST /ratelimit/check.
func (s *Server) check(w http.ResponseWriter, r *http.Request) error {
	buf := bufPool.Get().(*buffers)
	defer buf.release()
	if err := s.readBody(w, r, buf); err != nil {
		return err
	}
	var req CheckRequest
	if err := parseBody(s.stdJSON, buf.body, &buf.esc, &req, nil); err != nil {
		return err
	}
	// req's strings alias buf: the limiter copies what it keeps.
	lr := req.limiterRequest()
	d, err := s.l.Check(r.Context(), &lr)
	if err != nil {
		return s.unavailable(r.Context(), err)
	}
	s.decided(w, &d)
	var id [identity.MaxID]byte
	var client []byte
	if d.Rule != nil {
		client = s.l.AppendClientID(id[:0], d.KeyedBy, &lr) // the id the limiter keyed the bucket by
		if !d.Allowed && s.cfg.OnDenied != nil {
			s.cfg.OnDenied(s.l, &d, &lr)
		}
	}
	buf.out = appendAnswer(buf.out[:0], &d, client)
	w.Write(buf.out) //nolint:errcheck // the client is gone; nothing to do
	return nil
}

func (s *Server) unavailable(ctx context.Context, err error) *jsonhttp.APIError {
	switch {
	case ctx.Err() != nil:
		s.cfg.Logger.Debug("server: check abandoned by the client", "err", err)
	default:
		s.failures.Warn(s.cfg.Logger, "server: limiter could not decide", "err", err)
	}
	return &jsonhttp.APIError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
		Message: "the rate limiter could not decide: " + err.Error()}
}

// readBody reads the request body into b.body, at most cfg.MaxBody bytes.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, b *buffers) error {
	buf, err := s.appendBody(w, r, b.body[:0])
	b.body = buf
	return err
}

// appendBody appends the request body to buf, at most cfg.MaxBody bytes.
func (s *Server) appendBody(w http.ResponseWriter, r *http.Request, buf []byte) ([]byte, error) {
	limit := s.cfg.MaxBody
	if r.ContentLength > limit {
		return buf, s.tooLarge()
	}
	if n := r.ContentLength; n > 0 && int64(cap(buf)) < n {
		buf = slices.Grow(buf, int(n))
	}
	rd := http.MaxBytesReader(w, r.Body, limit)
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, 512)
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				return buf, s.tooLarge()
			}
			return buf, &jsonhttp.APIError{Status: http.StatusBadRequest, Code: CodeInvalidRequest, Message: "could not read the request body: " + err.Error()}
		}
	}
}

func (s *Server) tooLarge() *jsonhttp.APIError {
	return &jsonhttp.APIError{Status: http.StatusRequestEntityTooLarge, Code: CodePayloadTooLarge,
		Message: "the request body is larger than " + strconv.FormatInt(s.cfg.MaxBody, 10) + " bytes"}
}

// healthz is GET /healthz: the process is up.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) error {
	jsonhttp.SetContentType(w.Header())
	io.WriteString(w, `{"status":"ok"}`+"\n") //nolint:errcheck
	return nil
}

// readyz is GET /readyz: Config.Ready's verdict.
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) error {
	ok, detail := true, map[string]any(nil)
	if s.cfg.Ready != nil {
		ok, detail = s.cfg.Ready()
	}
	status, code := "ready", http.StatusOK
	if !ok {
		status, code = "not_ready", http.StatusServiceUnavailable
	}
	b := append([]byte(`{"status":`), strconv.Quote(status)...)
	keys := make([]string, 0, len(detail))
	for k := range detail {
		if k != "status" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		v, err := json.Marshal(detail[k])
		if err != nil {
			return err
		}
		b = append(b, ',')
		b = jsonhttp.AppendString(b, k)
		b = append(b, ':')
		b = append(b, v...)
	}
	b = append(b, "}\n"...)
	jsonhttp.SetContentType(w.Header())
	w.WriteHeader(code)
	w.Write(b) //nolint:errcheck
	return nil
}

// decided reports d to Config.OnDecision and sets the answer's quota
// headers and JSON content type: what every decision's answer starts with.
func (s *Server) decided(w http.ResponseWriter, d *limiter.Decision) {
	if s.cfg.OnDecision != nil {
		s.cfg.OnDecision(d)
	}
	h := w.Header()
	headers.Set(h, d)
	jsonhttp.SetContentType(h)
}
