package admin

import (
	"context"
	"embed"
	"io/fs"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/console"
	"github.com/sluicehq/sluice/internal/jsonhttp"
	"github.com/sluicehq/sluice/internal/rls"
	"github.com/sluicehq/sluice/internal/rulestore"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
)

// Console is what the operator console (docs/console.md) reads besides the
// rules store. With Config.Console set, the admin API also serves:
//
//	GET  /console/                the console (a static page and its script, embedded)
//	POST /console/login           body {"token"} → a session cookie (session.go)
//	POST /console/logout
//	GET  /console/api/now         rates, store health, the rules in force
//	GET  /console/api/top         the callers denied most per rule, with their buckets
//	GET  /console/api/revisions   the revisions the console can show and roll back to
//	GET  /console/api/diff?from=A&to=B   the changes from revision A to B
//	POST /console/api/rollback    body {"revision"} (If-Match): the rules of that revision, applied
//	POST /explain                 a call explained without taking (explain.go)
type Console struct {
	Limiter *limiter.Limiter
	Sampler *console.Sampler
	Hitters *console.Hitters
	// Envoy, when set, explains whole Envoy requests (POST /explain with
	// descriptors) as the Envoy API plans them.
	Envoy *rls.Server
	// Store describes the counter store (kind, state, ...), read per page.
	Store func() map[string]any
	// Instance names this process (its listen address): with a PostgreSQL
	// rules store shared by a fleet, the numbers are this instance's.
	Instance string
}

//go:embed static
var staticFS embed.FS

// maxSeen bounds the rule sets the console remembers when the rules store
// keeps no history (the rules file): the last maxSeen revisions this
// process had in force.
const maxSeen = 50

// seenSets are the rule sets in force since start, oldest first.
type seenSets struct {
	mu   sync.Mutex
	sets []seenSet
}

type seenSet struct {
	set *rules.Set
	at  time.Time
}

func (ss *seenSets) add(ix *rules.Index) {
	if ix == nil || ix.Set() == nil {
		return
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if n := len(ss.sets); n > 0 && ss.sets[n-1].set.Revision == ix.Revision() {
		return
	}
	set := ix.Set().Clone()
	set.Revision = ix.Revision()
	ss.sets = append(ss.sets, seenSet{set: set, at: time.Now()})
	if len(ss.sets) > maxSeen {
		ss.sets = slices.Delete(ss.sets, 0, len(ss.sets)-maxSeen)
	}
}

func (ss *seenSets) at(rev int64) (*rules.Set, bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, s := range ss.sets {
		if s.set.Revision == rev {
			return s.set, true
		}
	}
	return nil, false
}

// routeConsole adds the console's routes.
func (s *server) routeConsole() {
	static, _ := fs.Sub(staticFS, "static")
	files := http.StripPrefix("/console/static/", http.FileServerFS(static))
	page := consoleHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/console/":
			http.ServeFileFS(w, r, static, "index.html")
		case strings.HasPrefix(r.URL.Path, "/console/static/") && !strings.HasSuffix(r.URL.Path, "/"):
			files.ServeHTTP(w, r)
		default:
			writeAPIError(w, notFound("no such resource %s; the console is at /console/", r.URL.Path))
		}
	}))
	s.route("/console/", map[string]handler{"GET": func(w http.ResponseWriter, r *http.Request) error {
		page.ServeHTTP(w, r)
		return nil
	}})
	s.route("/console", map[string]handler{"GET": func(w http.ResponseWriter, r *http.Request) error {
		http.Redirect(w, r, "/console/", http.StatusSeeOther)
		return nil
	}})
	s.route("/console/login", map[string]handler{"POST": s.login})
	s.route("/console/logout", map[string]handler{"POST": s.logout})
	s.route("/console/api/now", map[string]handler{"GET": s.consoleNow})
	s.route("/console/api/top", map[string]handler{"GET": s.consoleTop})
	s.route("/console/api/revisions", map[string]handler{"GET": s.consoleRevisions})
	s.route("/console/api/diff", map[string]handler{"GET": s.consoleDiff})
	s.route("/console/api/rollback", map[string]handler{"POST": s.rollback})
	s.src.Subscribe(s.seen.add)
	s.seen.add(s.src.Current())
}

// consolePublic reports whether a request needs no token: the console's
// page and script (which hold no data) and its login.
func consolePublic(r *http.Request) bool {
	p := r.URL.Path
	switch {
	case r.Method == http.MethodPost && p == "/console/login":
		return true
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		return false
	case p == "/console" || p == "/console/":
		return true
	}
	return len(p) > len("/console/static/") && p[:len("/console/static/")] == "/console/static/"
}

// consoleHeaders sets the headers of the console's files: a
// Content-Security-Policy that lets the page run only its own script and
// talk only to its own origin, and no framing, sniffing or caching.
func consoleHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
			"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

// login handles POST /console/login: body {"token": "..."}, one of the
// admin tokens; answers 204 with the session cookie, or 401.
func (s *server) login(w http.ResponseWriter, r *http.Request) error {
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	var lb struct {
		Token string `json:"token"`
	}
	if err := decodeStrict(body, &lb); err != nil {
		return err
	}
	if r.Header.Get("Origin") == "" && r.Header.Get("Sec-Fetch-Site") != "" {
		return forbidden("Origin: required of a browser's login")
	}
	name := ""
	if s.tokens.Set() {
		probe := &http.Request{Header: http.Header{"Authorization": {"Bearer " + lb.Token}}}
		var ok bool
		if name, ok = s.tokens.Check(probe); !ok {
			return &jsonhttp.APIError{Status: http.StatusUnauthorized, Code: CodeUnauthorized,
				Message: "token: not one of this server's --admin-token (SLUICE_ADMIN_TOKEN)"}
		}
	}
	http.SetCookie(w, sessionCookie(s.sessions.create(name), int(sessionTTL/time.Second)))
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *server) logout(w http.ResponseWriter, r *http.Request) error {
	s.sessions.drop(r)
	http.SetCookie(w, sessionCookie("", -1))
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// consoleNow handles GET /console/api/now.
func (s *server) consoleNow(w http.ResponseWriter, r *http.Request) error {
	st := s.src.Status()
	out := struct {
		Instance string         `json:"instance"`
		Scope    string         `json:"scope"`
		Rules    any            `json:"rules"`
		Store    map[string]any `json:"store"`
		console.Now
	}{Instance: s.console.Instance, Rules: st, Now: console.Now{Series: []console.Point{}}}
	out.Scope = "this sluice"
	if st.Kind == "postgres" {
		out.Scope = "this instance only (" + s.console.Instance + "): the rules are shared by every sluice on the rules database, the numbers are each instance's own"
	}
	if s.console.Store != nil {
		out.Store = s.console.Store()
	}
	if s.console.Sampler != nil {
		out.Now = s.console.Sampler.Now()
	}
	setRevision(w, st.Revision)
	writeJSON(w, http.StatusOK, out)
	return nil
}

type topCaller struct {
	Caller    string  `json:"caller"` // as an operator recognises it: never a secret
	Denials   uint64  `json:"denials"`
	MaxErr    uint64  `json:"max_overcount"`
	Limit     int64   `json:"limit,omitempty"`
	Remaining int64   `json:"remaining"`
	Reset     float64 `json:"reset_after_s"`
	State     string  `json:"state"` // "" when read, else why not
}

// consoleTop handles GET /console/api/top[?n=10]: per rule, the callers
// denied most in the last one to two minutes, each with its bucket read
// now (without taking).
func (s *server) consoleTop(w http.ResponseWriter, r *http.Request) error {
	n := 10
	if v := r.URL.Query().Get("n"); v != "" {
		k, err := strconv.Atoi(v)
		if err != nil || k < 1 || k > console.K {
			return invalid("n: want 1 to %d, got %q", console.K, v)
		}
		n = k
	}
	type ruleTop struct {
		Rule    string      `json:"rule"`
		Denials uint64      `json:"denials"`
		Bound   uint64      `json:"max_overcount"`
		Callers []topCaller `json:"callers"`
	}
	out := struct {
		Scope     string    `json:"scope"`
		Window    string    `json:"window"`
		K         int       `json:"counters_per_rule"`
		Untracked uint64    `json:"untracked_denials"`
		Rules     []ruleTop `json:"rules"`
	}{Scope: "this instance", Window: "the last one to two minutes", K: console.K, Rules: []ruleTop{}}
	if s.console.Hitters == nil {
		writeJSON(w, http.StatusOK, out)
		return nil
	}
	tops, untracked := s.console.Hitters.Top(n)
	out.Untracked = untracked
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	for _, t := range tops {
		rt := ruleTop{Rule: t.Rule, Denials: t.Denials, Bound: t.Bound, Callers: []topCaller{}}
		for _, c := range t.Callers {
			tc := topCaller{Caller: c.Shown, Denials: c.Count, MaxErr: c.MaxErr}
			if s.console.Limiter != nil {
				res, limit, ok, err := s.console.Limiter.PeekBucket(ctx, t.Rule, c.Client)
				switch {
				case err != nil:
					tc.State = "unreadable: " + err.Error()
				case !ok:
					tc.State = "the rule is no longer in force"
				default:
					tc.Limit, tc.Remaining, tc.Reset = limit, res.Remaining, secs(res.ResetAfter)
				}
			}
			rt.Callers = append(rt.Callers, tc)
		}
		out.Rules = append(out.Rules, rt)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

type revisionEntry struct {
	Revision int64    `json:"revision"`
	Time     string   `json:"time,omitempty"`
	Actors   []string `json:"actors,omitempty"`
	Changes  int      `json:"changes"`
}

// consoleRevisions handles GET /console/api/revisions: the revisions,
// newest first — from the rules store's history (PostgreSQL), else those
// this process had in force since it started (at most maxSeen).
func (s *server) consoleRevisions(w http.ResponseWriter, r *http.Request) error {
	out := struct {
		Current   int64           `json:"current"`
		From      string          `json:"from"`
		Revisions []revisionEntry `json:"revisions"`
	}{Revisions: []revisionEntry{}}
	_, out.Current = s.current()
	if h, ok := s.src.(rulestore.Historian); ok {
		out.From = "the rules store's history"
		cs, err := h.History(r.Context(), rulestore.HistoryQuery{Limit: rulestore.MaxHistoryLimit})
		if err != nil {
			return err
		}
		for _, c := range cs {
			n := len(out.Revisions)
			if n == 0 || out.Revisions[n-1].Revision != c.Revision {
				out.Revisions = append(out.Revisions, revisionEntry{Revision: c.Revision,
					Time: c.Time.UTC().Format(time.RFC3339)})
				n++
			}
			e := &out.Revisions[n-1]
			e.Changes++
			if !slices.Contains(e.Actors, c.Actor) {
				e.Actors = append(e.Actors, c.Actor)
			}
		}
	} else {
		out.From = "the revisions this sluice had in force since it started (the " + s.src.Status().Kind + " rules store keeps no history)"
		s.seen.mu.Lock()
		var prev *rules.Set
		for _, ss := range s.seen.sets {
			e := revisionEntry{Revision: ss.set.Revision, Time: ss.at.UTC().Format(time.RFC3339)}
			if prev != nil {
				e.Changes = len(DiffSets(prev, ss.set))
			}
			prev = ss.set
			out.Revisions = append(out.Revisions, e)
		}
		s.seen.mu.Unlock()
		slices.Reverse(out.Revisions)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// setAt returns the rule set in force at revision n: the current one, from
// the store's history, or from the revisions this process saw.
func (s *server) setAt(ctx context.Context, n int64) (*rules.Set, error) {
	if set, rev := s.current(); rev == n {
		return set, nil
	}
	if h, ok := s.src.(rulestore.Historian); ok {
		return h.SetAt(ctx, n)
	}
	if set, ok := s.seen.at(n); ok {
		return set, nil
	}
	return nil, notFound("revision %d: not known; the %s rules store keeps no history, and this sluice had it not in force since it started (see GET /console/api/revisions)",
		n, s.src.Status().Kind)
}

func revParam(r *http.Request, name string) (int64, error) {
	v := r.URL.Query().Get(name)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, invalid("%s: want a revision number ≥ 0, got %q", name, v)
	}
	return n, nil
}

// consoleDiff handles GET /console/api/diff?from=A&to=B: the changes that
// turn the rules of revision A into those of B.
func (s *server) consoleDiff(w http.ResponseWriter, r *http.Request) error {
	from, err := revParam(r, "from")
	if err != nil {
		return err
	}
	to, err := revParam(r, "to")
	if err != nil {
		return err
	}
	a, err := s.setAt(r.Context(), from)
	if err != nil {
		return err
	}
	b, err := s.setAt(r.Context(), to)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, struct {
		From    int64    `json:"from"`
		To      int64    `json:"to"`
		Changes []Change `json:"changes"`
	}{from, to, DiffSets(a, b)})
	return nil
}

// rollback handles POST /console/api/rollback[?dry_run=true], body
// {"revision": N}: makes the rules, clients and default plan those of
// revision N, as POST /apply would with that revision's document (the
// same Update, If-Match honoured, one new revision).
func (s *server) rollback(w http.ResponseWriter, r *http.Request) error {
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	var rb struct {
		Revision *int64 `json:"revision"`
	}
	if err := decodeStrict(body, &rb); err != nil {
		return err
	}
	if rb.Revision == nil || *rb.Revision < 0 {
		return invalid(`revision: required, the revision to go back to, e.g. {"revision": 7}`)
	}
	set, err := s.setAt(r.Context(), *rb.Revision)
	if err != nil {
		return err
	}
	doc := applyDoc{set: set.Clone(), rules: true, clients: true, defaultPlan: true}
	return s.applyDoc(w, r, doc)
}
