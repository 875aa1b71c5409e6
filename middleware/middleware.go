// Package middleware rate-limits net/http handlers with a sluice limiter,
// in-process: the same identity rules, the same decisions and the same
// headers as the sluice gateway, which is built on it.
//
//	request → Identifier (user from a verified JWT, registered API key,
//	          client IP behind trusted proxies) → limiter.Check
//	        → denied:  429 + quota headers + Retry-After + JSON body; next never runs
//	        → allowed: quota headers on the response, then next
//
// The decision is made from the request line and headers alone: a denied
// call is answered without its body being read.
package middleware

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sluicehq/sluice/headers"
	"github.com/sluicehq/sluice/internal/jsonhttp"
	"github.com/sluicehq/sluice/internal/seam/mwhook"
	"github.com/sluicehq/sluice/limiter"
)

// Option configures Middleware.
type Option func(*options)

type options struct {
	id       Identifier
	cost     func(*http.Request) int64
	endpoint func(*http.Request) (method, path string)
	onError  func(http.ResponseWriter, *http.Request, error)
	shape    time.Duration // WithShaping's max wait; 0: reject at once
	// observe, when set, is told every decision (internal/seam/mwhook).
	observe func(d limiter.Decision, req limiter.Request)
}

func init() {
	mwhook.Observe = func(fn func(d limiter.Decision, req limiter.Request)) any {
		return Option(func(o *options) { o.observe = fn })
	}
}

// WithIdentifier sets who calls are from: JWT verification, the API key
// header, trusted proxies (see Identifier). Default: the zero Identifier —
// no users, API keys from X-API-Key, callers keyed by their peer address.
// IPv6 callers are keyed by their prefix as the limiter is configured
// (limiter.Config.IPv6Prefix).
func WithIdentifier(id *Identifier) Option {
	return func(o *options) {
		o.id = Identifier{}
		if id != nil {
			o.id = *id // copied: later changes to *id do not reach the middleware
		}
	}
}

// WithCost sets how many units a call takes (values below 1 count as 1).
// Default: 1 per call. fn must not read the body, which would defeat
// answering a denied call before it is sent.
func WithCost(fn func(*http.Request) int64) Option {
	return func(o *options) { o.cost = fn }
}

// WithEndpoint sets the endpoint rules match a call against. Default
// DefaultEndpoint: the request's method and its cleaned path.
func WithEndpoint(fn func(*http.Request) (method, path string)) Option {
	return func(o *options) { o.endpoint = fn }
}

// WithErrorHandler sets what answers a call the limiter could not decide
// (e.g. its store is down). Default DefaultErrorHandler: 503 with a JSON
// error.
func WithErrorHandler(fn func(w http.ResponseWriter, r *http.Request, err error)) Option {
	return func(o *options) { o.onError = fn }
}

// DefaultEndpoint is the endpoint of r as rules see it: its method and its
// path as the request spelled it (URL.EscapedPath). The limiter cleans it
// as it does for every entry point (see Paths in package rules), so that
// "/api//orders/", "/api/./orders", "/api/%6frders", "/api%2Forders" and
// "/api/orders;jsessionid=1" all count as "/api/orders" and an upstream
// that normalizes paths cannot be reached around a rule. The query is not
// part of it. It allocates only when the path needs escaping and the
// request did not spell it.
func DefaultEndpoint(r *http.Request) (method, p string) {
	return r.Method, escapedPath(r.URL)
}

// escapedPath is u.EscapedPath(), without the work of escaping for a path
// that needs none: one of letters, digits and -._~/$&+,:;=@ only, which a
// path never escapes.
func escapedPath(u *url.URL) string {
	if u.RawPath == "" {
		for i := 0; i < len(u.Path); i++ {
			if !pathBytes[u.Path[i]] {
				return u.EscapedPath()
			}
		}
		return u.Path
	}
	return u.EscapedPath()
}

var pathBytes = func() (t [256]bool) {
	for b := 0; b < 256; b++ {
		t[b] = 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' ||
			strings.IndexByte("-._~/$&+,:;=@", byte(b)) >= 0
	}
	return t
}()

// DefaultErrorHandler answers a call the limiter could not decide with 503
// and {"error":"unavailable","message":"the rate limiter could not decide"}.
// A call whose client has gone away gets nothing.
func DefaultErrorHandler(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return
	}
	jsonhttp.WriteError(w, http.StatusServiceUnavailable, "unavailable", "the rate limiter could not decide")
}

// Middleware returns a middleware that checks every call with l before
// next sees it. A denied call is answered at once — 429, the quota headers,
// Retry-After and {"error":"rate_limit_exceeded","retry_after":N} (see
// headers.WriteDenied) — without reading its body, and next never runs. An
// allowed call gets the quota headers set on its response, then goes to
// next. A call no rule matches goes to next with no quota headers. A call
// the limiter cannot decide goes to the error handler (WithErrorHandler).
//
// The middleware itself allocates only what headers.Set does (two
// allocations); verifying a bearer token costs what golang-jwt does.
func Middleware(l *limiter.Limiter, opts ...Option) func(http.Handler) http.Handler {
	o := options{endpoint: DefaultEndpoint, onError: DefaultErrorHandler}
	for _, opt := range opts {
		opt(&o)
	}
	if o.id.APIKeyHeader != "" {
		o.id.APIKeyHeader = http.CanonicalHeaderKey(o.id.APIKeyHeader)
	}
	if o.id.ForwardedHeader != "" {
		o.id.ForwardedHeader = http.CanonicalHeaderKey(o.id.ForwardedHeader)
	}
	f := &filter{l: l, o: o}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			f.serve(w, r, next)
		})
	}
}

// filter is one configured middleware. Safe for concurrent use.
type filter struct {
	l *limiter.Limiter
	o options
}

func (f *filter) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	c := f.o.id.Identify(r, f.l.Rules())
	method, p := f.o.endpoint(r)
	req := limiter.Request{User: c.User, APIKey: c.APIKey, IP: c.IP, Plan: c.Plan, Method: method, Path: p, Cost: 1, Header: r.Header}
	if f.o.cost != nil {
		req.Cost = max(f.o.cost(r), 1)
	}
	if f.o.shape > 0 {
		f.serveShaped(w, r, next, &req)
		return
	}
	d, err := f.l.Check(r.Context(), &req)
	if f.o.observe != nil && err == nil {
		f.o.observe(d, req)
	}
	if f.refused(w, r, &d, err) {
		return
	}
	headers.Set(w.Header(), &d)
	next.ServeHTTP(w, r)
}

// refused answers a call the limiter could not decide (err) or denied,
// and reports whether it did; an allowed call is left to the caller.
func (f *filter) refused(w http.ResponseWriter, r *http.Request, d *limiter.Decision, err error) bool {
	if err != nil {
		f.undecided(w, r, err)
		return true
	}
	if !d.Allowed {
		headers.WriteDenied(w, d)
		return true
	}
	return false
}

// undecided is the one place a call the limiter could not decide is
// handled (no rules loaded, a store that returned an error), through the
// error handler. A shared store that is down is not such a call when it is
// wrapped in store/failover: each rule's failure_mode decides it.
func (f *filter) undecided(w http.ResponseWriter, r *http.Request, err error) {
	f.o.onError(w, r, err)
}
