// Package admin serves sluice's admin API (docs/api.md): reading and changing
// the rules, the client registry and the default plan of a rulestore.Source,
// one resource at a time or declaratively with POST /apply.
//
// Routes (JSON in and out):
//
//	GET    /rules             {"revision", "default_plan", "rules": [...]}
//	GET    /rules/{id}        the rule
//	PUT    /rules/{id}        body: a rule ("id" optional, must match the path)
//	                          → 201 created / 200 replaced, {"revision", "rule"}
//	DELETE /rules/{id}        → 200 {"revision"}; 404 when unknown
//	GET    /clients           {"revision", "default_plan", "clients": {id: {"plan"}}}
//	GET    /clients/{id}      {"plan"}
//	PUT    /clients/{id}      body {"plan"} → 201 / 200, {"revision", "id", "plan"}
//	DELETE /clients/{id}      → 200 {"revision"}; 404 when unknown
//	GET    /default_plan      {"revision", "plan"}
//	PUT    /default_plan      body {"plan"} → 200 {"revision", "plan"}
//	POST   /apply[?dry_run=true]  body: a rule set document; see handleApply
//
// With a rules store that keeps a history (rulestore.Historian: the
// PostgreSQL store), also:
//
//	GET    /rules?revision=N  the rules in force at revision N (ETag: that revision)
//	GET    /clients?revision=N
//	GET    /rules/{id}/history[?limit=N&before=REV]  the rule's changes, newest first
//	GET    /history[?kind=rule|client|default_plan&id=ID&limit=N&before=REV]
//
// Every change is recorded with its actor: the name of the caller's named
// token ("alice:s3cret" is alice's), else the X-Sluice-Actor header, else
// "admin-api", followed by the caller's address, e.g. "alice (10.0.0.7)".
//
// Before its token, every request must come from where a web page cannot
// (guard.go): a Host that is the listen address, localhost, an IP address
// or an allowed name (else 403, DNS rebinding), no Origin or an allowed one
// (else 403), and for a write a JSON body (else 415). With Config.Pprof,
// GET /debug/pprof/... serves Go's profiles, never the command line.
//
// Every response to a read carries the revision as ETag ("7"); every write
// honours If-Match: "7" and answers 412 precondition_failed when the rules
// moved on. Each write is one rulestore Update: validated whole, all or
// nothing, one revision; a write that changes nothing answers 200 with the
// revision it found, and stores nothing. A write the store cannot take (a
// full disk, a read-only rules file, an unreachable database, ...) answers
// 503 unavailable naming the cause. Errors are {"error": code, "message": text}, the
// message naming the field that is wrong.
package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/jsonhttp"
	"github.com/sluicehq/sluice/internal/rulestore"
	"github.com/sluicehq/sluice/rules"
)

// Config configures the admin API. The zero value serves without
// authentication (CheckBind allows that on loopback only).
type Config struct {
	// Token, when set, is required of every request as
	// "Authorization: Bearer <token>": one token, or several separated by
	// commas; a token "name:secret" records its changes as name's (see
	// Tokens). Default "": no authentication.
	Token string
	// Logger receives changes and internal errors. Default slog.Default().
	Logger *slog.Logger
	// MaxBody caps request bodies; a larger one is answered 413. Default
	// 1 MiB, room for thousands of rules in one POST /apply.
	MaxBody int64

	// Listen is the address the API listens on (--admin-listen): its host
	// is a name the Host header may carry, besides "localhost", IP
	// addresses and AllowedHosts. Others are refused (see guard.go).
	Listen string
	// AllowedHosts are more names the Host header may carry
	// (--admin-allowed-host), e.g. the name of a load balancer in front.
	AllowedHosts []string
	// AllowedOrigins are the web origins ("https://console.internal")
	// whose pages may call the API besides its own (--admin-allowed-origin).
	AllowedOrigins []string
	// Pprof serves Go's profiles under /debug/pprof/ (--pprof), behind
	// the token like the rest of the API; never /debug/pprof/cmdline, the
	// command line, which can hold secrets. Default off.
	Pprof bool
	// Console, when set, serves the operator console under /console/ and
	// POST /explain (console.go). Default nil: neither.
	Console *Console
}

// DefaultMaxBody is the MaxBody used when Config.MaxBody is 0.
const DefaultMaxBody = 1 << 20

// Error codes of jsonhttp.APIError.
const (
	CodeInvalidRequest     = "invalid_request"
	CodeNotFound           = "not_found"
	CodeGone               = "gone"
	CodePreconditionFailed = "precondition_failed"
	CodeUnauthorized       = "unauthorized"
	CodePayloadTooLarge    = "payload_too_large"
	CodeMethodNotAllowed   = "method_not_allowed"
	CodeUnavailable        = "unavailable"
	CodeInternal           = "internal"
)

func invalid(format string, args ...any) *jsonhttp.APIError {
	return &jsonhttp.APIError{Status: http.StatusBadRequest, Code: CodeInvalidRequest, Message: fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) *jsonhttp.APIError {
	return &jsonhttp.APIError{Status: http.StatusNotFound, Code: CodeNotFound, Message: fmt.Sprintf(format, args...)}
}

// server holds the admin API's state. Safe for concurrent use: all state is
// in the Source.
type server struct {
	src     rulestore.Source
	tokens  Tokens
	guard   *guard
	log     *slog.Logger
	maxBody int64
	mux     *http.ServeMux

	console  *Console
	sessions sessions // the console's logins
	seen     seenSets // rule sets in force since start, when the store keeps no history
}

// handler is an admin handler: it writes a response, or returns an error
// for serve to render.
type handler func(w http.ResponseWriter, r *http.Request) error

// New returns the admin API serving src.
func New(src rulestore.Source, cfg Config) http.Handler {
	s := &server{src: src, log: cfg.Logger, maxBody: cfg.MaxBody, mux: http.NewServeMux()}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.maxBody <= 0 {
		s.maxBody = DefaultMaxBody
	}
	// A malformed token fails closed: every request is answered 401
	// (CheckBind refuses to start with it).
	s.tokens = ParseTokens(cfg.Token)
	if err := s.tokens.Err(); err != nil {
		s.log.Error("admin: --admin-token is malformed; every request is refused (401)", "error", err)
	}
	s.guard = newGuard(cfg)
	// Methods are dispatched here rather than by ServeMux patterns so that
	// a wrong method gets the JSON 405 like every other error.
	s.route("/rules", map[string]handler{"GET": s.listRules})
	s.route("/rules/{id}", map[string]handler{"GET": s.getRule, "PUT": s.putRule, "DELETE": s.deleteRule})
	s.route("/clients", map[string]handler{"GET": s.listClients})
	// {id...}: a client id may hold a slash ("ip:2001:db8::/64").
	s.route("/clients/{id...}", map[string]handler{"GET": s.getClient, "PUT": s.putClient, "DELETE": s.deleteClient})
	s.route("/default_plan", map[string]handler{"GET": s.getDefaultPlan, "PUT": s.putDefaultPlan})
	s.route("/apply", map[string]handler{"POST": s.apply})
	s.route("/rules/{id}/history", map[string]handler{"GET": s.ruleHistory})
	s.route("/history", map[string]handler{"GET": s.history})
	s.routePprof(cfg.Pprof)
	s.route("/explain", map[string]handler{"POST": s.explain})
	if cfg.Console != nil {
		s.console = cfg.Console
		s.routeConsole()
	}
	s.mux.Handle("/", s.serve(func(w http.ResponseWriter, r *http.Request) error {
		return notFound("no such resource %s; see GET /rules, /clients, /default_plan, POST /apply", r.URL.Path)
	}))
	return s
}

// route serves pattern with one handler per method; HEAD is served as GET.
func (s *server) route(pattern string, methods map[string]handler) {
	allow := make([]string, 0, len(methods)+1)
	for m := range methods {
		allow = append(allow, m)
	}
	if _, ok := methods["GET"]; ok {
		allow = append(allow, "HEAD")
	}
	slices.Sort(allow)
	allowed := strings.Join(allow, ", ")
	s.mux.Handle(pattern, s.serve(func(w http.ResponseWriter, r *http.Request) error {
		m := r.Method
		if m == "HEAD" {
			m = "GET"
		}
		h, ok := methods[m]
		if !ok {
			w.Header().Set("Allow", allowed)
			return &jsonhttp.APIError{Status: http.StatusMethodNotAllowed, Code: CodeMethodNotAllowed,
				Message: fmt.Sprintf("%s %s: method not allowed, want %s", r.Method, r.URL.Path, allowed)}
		}
		if m != "GET" {
			if err := checkBody(r); err != nil {
				return err
			}
		}
		return h(w, r)
	}))
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := s.guard.check(r); err != nil {
		s.writeError(w, r, err)
		return
	}
	var named string
	if s.tokens.Set() && !(s.console != nil && consolePublic(r)) {
		var ok bool
		named, ok = s.tokens.Check(r)
		if !ok && s.console != nil && r.Header.Get("Authorization") == "" {
			if named, ok = s.sessions.check(r); ok && !fromOwnPage(r) {
				s.writeError(w, r, forbidden("the console's session may be used only by the console's own pages (Sec-Fetch-Site %q, Origin %q)",
					r.Header.Get("Sec-Fetch-Site"), r.Header.Get("Origin")))
				return
			}
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", "Bearer")
			s.writeError(w, r, &jsonhttp.APIError{Status: http.StatusUnauthorized, Code: CodeUnauthorized,
				Message: "Authorization: want \"Bearer <token>\" with one of the tokens of this server's --admin-token (SLUICE_ADMIN_TOKEN)"})
			return
		}
	}
	actor, err := actorOf(r, named)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.mux.ServeHTTP(w, r.WithContext(rulestore.WithActor(r.Context(), actor)))
}

// serve adapts a handler, rendering the error it returns.
func (s *server) serve(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	})
}

// writeError renders err, the one place errors become responses.
func (s *server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	ae := s.apiError(err)
	if ae.Status >= 500 {
		s.log.Error("admin: request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	}
	writeAPIError(w, ae)
}

// writeAPIError renders ae as {"error": Code, "message": Message}.
func writeAPIError(w http.ResponseWriter, ae *jsonhttp.APIError) {
	w.Header().Set("Cache-Control", "no-store")
	ae.Write(w)
}

// apiError maps err to the answer it calls for.
func (s *server) apiError(err error) *jsonhttp.APIError {
	var ae *jsonhttp.APIError
	var mbe *http.MaxBytesError
	var fe *rules.FieldError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &mbe):
		return &jsonhttp.APIError{Status: http.StatusRequestEntityTooLarge, Code: CodePayloadTooLarge,
			Message: fmt.Sprintf("body: larger than %d bytes", mbe.Limit)}
	case errors.Is(err, rulestore.ErrConflict):
		return &jsonhttp.APIError{Status: http.StatusPreconditionFailed, Code: CodePreconditionFailed,
			Message: "If-Match: " + strings.TrimPrefix(err.Error(), rulestore.ErrConflict.Error()+": ")}
	case errors.Is(err, rulestore.ErrUnavailable):
		// First: a store that cannot take writes because of what it holds
		// (a broken hand edit of the rules file wraps that file's field
		// error) is not the request's fault.
		return &jsonhttp.APIError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: err.Error()}
	case errors.Is(err, rulestore.ErrInvalid):
		if errors.As(err, &fe) {
			return invalid("%s", fe.Error())
		}
		return invalid("%s", strings.TrimPrefix(err.Error(), rulestore.ErrInvalid.Error()+": "))
	case errors.As(err, &fe):
		return invalid("%s", fe.Error())
	case errors.Is(err, rulestore.ErrNotFound):
		return notFound("%s", strings.TrimPrefix(err.Error(), "rulestore: "))
	case errors.Is(err, rulestore.ErrGone):
		return &jsonhttp.APIError{Status: http.StatusGone, Code: CodeGone,
			Message: strings.TrimPrefix(err.Error(), rulestore.ErrGone.Error()+": ")}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &jsonhttp.APIError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "the request was canceled before the change was stored"}
	case errors.Is(err, rulestore.ErrClosed):
		return &jsonhttp.APIError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "the rules store is shutting down"}
	}
	return &jsonhttp.APIError{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error; see the server log"}
}

// writeJSON writes v as the response body.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // messages quote "<id>"; this is not HTML
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		b.Reset()
		b.WriteString(`{"error":"internal","message":"internal error; see the server log"}` + "\n")
	}
	h := w.Header()
	jsonhttp.SetContentType(h)
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

// setRevision sets the ETag of a response to the revision it reflects.
func setRevision(w http.ResponseWriter, rev int64) {
	w.Header().Set("ETag", `"`+strconv.FormatInt(rev, 10)+`"`)
}

// readBody reads the request body, at most s.maxBody bytes.
func (s *server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, err
		}
		return nil, invalid("body: %v", err)
	}
	return b, nil
}

// ifMatch returns the revision a write is conditional on: the If-Match
// header's "<revision>", or -1 when there is none (or "*").
func (s *server) ifMatch(r *http.Request) (int64, error) {
	v := strings.TrimSpace(r.Header.Get("If-Match"))
	if v == "" || v == "*" {
		return -1, nil
	}
	t := v
	if len(t) >= 2 && t[0] == '"' && t[len(t)-1] == '"' {
		t = t[1 : len(t)-1]
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || strings.HasPrefix(v, "W/") {
		return 0, &jsonhttp.APIError{Status: http.StatusPreconditionFailed, Code: CodePreconditionFailed,
			Message: fmt.Sprintf(`If-Match: %s is not a revision; the revision is "%d"`, v, s.src.Current().Revision())}
	}
	return n, nil
}

// decodeStrict decodes a small JSON object body into dst (a pointer to a
// struct) rejecting unknown fields, wrong types and trailing data, with
// errors that name the field.
func decodeStrict(body []byte, dst any) error {
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	err := d.Decode(dst)
	if err == nil {
		if _, terr := d.Token(); terr != io.EOF {
			return invalid("body: unexpected data after the JSON object at byte %d", d.InputOffset())
		}
		return nil
	}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return invalid("body: empty, want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("body: invalid JSON: unexpected end of input")
	case errors.As(err, &se):
		return invalid("body: invalid JSON at byte %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	case errors.As(err, &te):
		if te.Field == "" {
			return invalid("body: want a JSON object, got %s", te.Value)
		}
		want := te.Type.Kind().String()
		if te.Type.Kind() == reflect.String || te.Type.Kind() == reflect.Pointer && te.Type.Elem().Kind() == reflect.String {
			want = "a string"
		}
		return invalid("%s: want %s, got %s", te.Field, want, te.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if n, err := strconv.Unquote(name); err == nil && n != "" && !strings.ContainsAny(n, " .:\"\\") {
			name = n
		}
		return invalid("%s: unknown field, want %s", name, jsonFields(dst))
	}
	return invalid("body: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// jsonFields lists the JSON names of the fields of *dst, for messages.
func jsonFields(dst any) string {
	t := reflect.TypeOf(dst).Elem()
	var names []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		names = append(names, name)
	}
	return strings.Join(names, ", ")
}
