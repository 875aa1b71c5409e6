package admin

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/jsonhttp"
	"github.com/sluicehq/sluice/internal/rulestore"
	"github.com/sluicehq/sluice/rules"
)

// ActorHeader names who makes a change, for the history: a person or a
// deploy job ("alice", "ci/deploy-1234"). It is what the caller says, as
// trustworthy as the admin token it comes with.
const ActorHeader = "X-Sluice-Actor"

// maxActor caps the length of ActorHeader, in bytes.
const maxActor = 128

// actorOf returns the actor of a request: named, the name of the token it
// authenticated with, else its ActorHeader (else "admin-api"), and the
// caller's IP address, "alice (10.0.0.7)".
func actorOf(r *http.Request, named string) (string, error) {
	name := named
	if name == "" {
		name = strings.TrimSpace(r.Header.Get(ActorHeader))
	}
	switch {
	case name == "":
		name = "admin-api"
	case len(name) > maxActor:
		return "", invalid("%s: %d bytes, want at most %d", ActorHeader, len(name), maxActor)
	case !utf8.ValidString(name) || strings.ContainsFunc(name, unicode.IsControl):
		return "", invalid("%s: want printable UTF-8 text, e.g. \"alice\"", ActorHeader)
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if host == "" {
		return name, nil
	}
	return name + " (" + host + ")", nil
}

// noHistory is the answer to a history request when the rules store keeps
// none (the rules file).
func (s *server) noHistory(what string) *jsonhttp.APIError {
	st := s.src.Status()
	return &jsonhttp.APIError{Status: http.StatusNotFound, Code: CodeNotFound,
		Message: what + " needs the postgres rules store (sluice serve --rules postgres://...); this sluice keeps its rules in the " +
			st.Kind + " " + st.Location + ", which keeps no history"}
}

// setFor returns the rule set a GET /rules or /clients asks for: the one in
// force, or with ?revision=N the one in force at revision N (from the
// history).
func (s *server) setFor(r *http.Request) (*rules.Set, int64, error) {
	q := r.URL.Query()
	if !q.Has("revision") {
		set, rev := s.current()
		return set, rev, nil
	}
	v := q.Get("revision")
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return nil, 0, invalid("revision: want a revision number ≥ 0, got %q", v)
	}
	h, ok := s.src.(rulestore.Historian)
	if !ok {
		ae := s.noHistory("revision: the rules of a past revision")
		ae.Status, ae.Code = http.StatusBadRequest, CodeInvalidRequest
		return nil, 0, ae
	}
	if cur := s.src.Current(); n == cur.Revision() && cur.Set() != nil {
		return cur.Set(), n, nil
	}
	set, err := h.SetAt(r.Context(), n)
	if err != nil {
		return nil, 0, err
	}
	return set, n, nil
}

// historyQuery reads ?limit= and ?before=.
func historyQuery(r *http.Request) (rulestore.HistoryQuery, error) {
	var hq rulestore.HistoryQuery
	q := r.URL.Query()
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > rulestore.MaxHistoryLimit {
			return hq, invalid("limit: want 1 to %d, got %q", rulestore.MaxHistoryLimit, v)
		}
		hq.Limit = n
	}
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return hq, invalid("before: want a revision number ≥ 1, got %q", v)
		}
		hq.Before = n
	}
	return hq, nil
}

// historyEntry is one entry of a history answer.
type historyEntry struct {
	Revision int64  `json:"revision"`
	Time     string `json:"time"` // RFC 3339, UTC
	Actor    string `json:"actor"`
	Kind     string `json:"kind,omitempty"`
	ID       string `json:"id,omitempty"`
	Op       string `json:"op"`
	Before   any    `json:"before,omitempty"`
	After    any    `json:"after,omitempty"`
}

func entries(cs []rulestore.Change, withKind bool) []historyEntry {
	out := make([]historyEntry, len(cs))
	for i, c := range cs {
		e := historyEntry{Revision: c.Revision, Time: c.Time.UTC().Format("2006-01-02T15:04:05.000Z07:00"),
			Actor: c.Actor, Op: c.Op}
		if c.Before != nil {
			e.Before = c.Before
		}
		if c.After != nil {
			e.After = c.After
		}
		if withKind {
			e.Kind, e.ID = c.Kind, c.ID
		}
		out[i] = e
	}
	return out
}

// ruleHistory handles GET /rules/{id}/history: the rule's recorded
// changes, newest first, {"id", "history": [{"revision", "time", "actor",
// "op", "before", "after"}]}. 404 when the rule never existed.
func (s *server) ruleHistory(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	h, ok := s.src.(rulestore.Historian)
	if !ok {
		return s.noHistory("GET /rules/" + id + "/history")
	}
	hq, err := historyQuery(r)
	if err != nil {
		return err
	}
	hq.Kind, hq.ID = rulestore.KindRule, id
	cs, err := h.History(r.Context(), hq)
	if err != nil {
		return err
	}
	if len(cs) == 0 && hq.Before == 0 {
		return notFound("rule %q has no history: it never existed", id)
	}
	writeJSON(w, http.StatusOK, struct {
		ID      string         `json:"id"`
		History []historyEntry `json:"history"`
	}{id, entries(cs, false)})
	return nil
}

// history handles GET /history: every recorded change, newest first,
// optionally only of one kind (?kind=rule|client|default_plan) and id.
func (s *server) history(w http.ResponseWriter, r *http.Request) error {
	h, ok := s.src.(rulestore.Historian)
	if !ok {
		return s.noHistory("GET /history")
	}
	hq, err := historyQuery(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	hq.Kind, hq.ID = q.Get("kind"), q.Get("id")
	switch hq.Kind {
	case "", rulestore.KindRule, rulestore.KindClient, rulestore.KindDefaultPlan:
	default:
		return invalid("kind: want %s, %s or %s, got %q", rulestore.KindRule, rulestore.KindClient, rulestore.KindDefaultPlan, hq.Kind)
	}
	if hq.ID != "" && hq.Kind == "" {
		return invalid("id: needs kind (rule or client)")
	}
	cs, err := h.History(r.Context(), hq)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, struct {
		History []historyEntry `json:"history"`
	}{entries(cs, true)})
	return nil
}
