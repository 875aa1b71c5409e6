package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/rulestore"
	"github.com/sluicehq/sluice/internal/seam/rulewire"
	"github.com/sluicehq/sluice/rules"
)

// Change is one difference between two rule sets: what POST /apply did or,
// with dry_run, would do, and what `sluice rules apply` prints.
type Change struct {
	Op   string `json:"op"`           // OpCreate, OpUpdate or OpDelete
	Kind string `json:"kind"`         // KindRule, KindClient or KindDefaultPlan
	ID   string `json:"id,omitempty"` // the rule or client id; "" for the default plan
	// Before and After are the old and new value: a rules.Rule, a
	// rules.Client or (default plan) a string. Before is nil for a create,
	// After for a delete. Decoded from JSON they are generic values
	// (map[string]any, string).
	Before any `json:"before,omitempty"`
	After  any `json:"after,omitempty"`
}

// Values of Change.Op and Change.Kind.
const (
	OpCreate = "create"
	OpUpdate = "update"
	OpDelete = "delete"

	KindRule        = "rule"
	KindClient      = "client"
	KindDefaultPlan = "default_plan"
)

// DiffSets returns the changes that turn old into next: rules created or
// updated in next's order, then rules deleted in old's order, then clients
// by id, then the default plan. Rules are compared by meaning (a missing
// "by" equals "client", a missing "enabled" equals true, ...); a change of
// rule order alone is not a change. The revisions are not compared. A nil
// set is an empty one.
func DiffSets(old, next *rules.Set) []Change {
	if old == nil {
		old = &rules.Set{}
	}
	if next == nil {
		next = &rules.Set{}
	}
	changes := []Change{}
	oldAt := make(map[string]int, len(old.Rules))
	for i := range old.Rules {
		oldAt[old.Rules[i].ID] = i
	}
	inNext := make(map[string]bool, len(next.Rules))
	for _, nr := range next.Rules {
		inNext[nr.ID] = true
		i, ok := oldAt[nr.ID]
		switch {
		case !ok:
			changes = append(changes, Change{Op: OpCreate, Kind: KindRule, ID: nr.ID, After: nr})
		case !sameRule(old.Rules[i], nr):
			changes = append(changes, Change{Op: OpUpdate, Kind: KindRule, ID: nr.ID, Before: old.Rules[i], After: nr})
		}
	}
	for _, or := range old.Rules {
		if !inNext[or.ID] {
			changes = append(changes, Change{Op: OpDelete, Kind: KindRule, ID: or.ID, Before: or})
		}
	}
	ids := make([]string, 0, len(old.Clients)+len(next.Clients))
	for id := range old.Clients {
		ids = append(ids, id)
	}
	for id := range next.Clients {
		if _, ok := old.Clients[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		oc, inOld := old.Clients[id]
		nc, inNew := next.Clients[id]
		switch {
		case !inOld:
			changes = append(changes, Change{Op: OpCreate, Kind: KindClient, ID: id, After: nc})
		case !inNew:
			changes = append(changes, Change{Op: OpDelete, Kind: KindClient, ID: id, Before: oc})
		case oc != nc:
			changes = append(changes, Change{Op: OpUpdate, Kind: KindClient, ID: id, Before: oc, After: nc})
		}
	}
	if old.DefaultPlan != next.DefaultPlan {
		changes = append(changes, Change{Op: OpUpdate, Kind: KindDefaultPlan, Before: old.DefaultPlan, After: next.DefaultPlan})
	}
	return changes
}

// ruleMeaning is a Rule with its defaults spelled out, compared with
// reflect.DeepEqual (match.entries is a slice, match.headers a map).
type ruleMeaning struct {
	rules.Rule
	enabled bool
}

func sameRule(a, b rules.Rule) bool {
	ma, mb := meaning(a), meaning(b)
	if len(ma.Match.Entries) == 0 && len(mb.Match.Entries) == 0 {
		ma.Match.Entries, mb.Match.Entries = nil, nil
	}
	if len(ma.Match.Headers) == 0 && len(mb.Match.Headers) == 0 {
		ma.Match.Headers, mb.Match.Headers = nil, nil
	}
	return reflect.DeepEqual(ma, mb)
}

func meaning(r rules.Rule) ruleMeaning {
	m := ruleMeaning{Rule: r, enabled: r.IsEnabled()}
	m.Enabled = nil
	if m.By == "" {
		m.By = rules.ByClient
	}
	if m.FailureMode == "" {
		m.FailureMode = rules.FailOpen
	}
	return m
}

// errNoChange aborts an Update that would change nothing.
var errNoChange = errors.New("admin: no change")

// apply handles POST /apply: make the rules what a set document says. The
// body is {"rules": [...], "clients": {...}, "default_plan": "..."}; each of
// the three replaces the current value when it is present and not null, and
// leaves it alone otherwise ("rules": [] deletes every rule; a "revision" is
// ignored, use If-Match). The document is validated whole, and the changes
// are stored in one Update, all or nothing, one revision; a document that
// changes nothing stores nothing. With ?dry_run=true the same Update runs
// under rulestore.WithDryRun and nothing is stored: the answer, or the
// error, is the one the apply would get, with the revision it would build
// on. The answer lists the changes: {"revision", "dry_run", "changes": [...]}.
func (s *server) apply(w http.ResponseWriter, r *http.Request) error {
	// The query and If-Match are checked before the body is read.
	if _, err := dryRunParam(r); err != nil {
		return err
	}
	if _, err := s.ifMatch(r); err != nil {
		return err
	}
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	doc, err := decodeApplyDoc(body)
	if err != nil {
		return err
	}
	return s.applyDoc(w, r, doc)
}

// applyDoc stores doc as POST /apply does, honouring ?dry_run and
// If-Match, and answers {"revision", "dry_run", "changes"}.
func (s *server) applyDoc(w http.ResponseWriter, r *http.Request, doc applyDoc) error {
	dryRun, err := dryRunParam(r)
	if err != nil {
		return err
	}
	ifRev, err := s.ifMatch(r)
	if err != nil {
		return err
	}

	// A dry run is the same Update, which then stores nothing: it builds
	// on the store's head, and fails as the apply would.
	ctx := r.Context()
	if dryRun {
		ctx = rulestore.WithDryRun(ctx)
	}
	var changes []Change
	var base, rev int64
	ix, err := s.src.Update(ctx, ifRev, func(set *rules.Set) error {
		base = set.Revision
		old := set.Clone()
		doc.merge(set)
		changes = DiffSets(old, set)
		if len(changes) == 0 {
			return errNoChange
		}
		return nil
	})
	switch {
	case errors.Is(err, errNoChange):
		rev = base
	case err != nil:
		return err
	case dryRun:
		rev = base
	default:
		rev = ix.Revision()
		s.log.Info("admin: rules applied", "changes", len(changes), "revision", rev)
	}
	setRevision(w, rev)
	writeJSON(w, http.StatusOK, struct {
		Revision int64    `json:"revision"`
		DryRun   bool     `json:"dry_run"`
		Changes  []Change `json:"changes"`
	}{rev, dryRun, changes})
	return nil
}

// dryRunParam reads ?dry_run: absent is false, present and empty true.
func dryRunParam(r *http.Request) (bool, error) {
	q := r.URL.Query()
	if !q.Has("dry_run") {
		return false, nil
	}
	v := q.Get("dry_run")
	if v == "" {
		return true, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, invalid("dry_run: want true or false, got %q", v)
	}
	return b, nil
}

// applyDoc is a POST /apply body: a set document validated whole, and
// which of its three parts are present and not null.
type applyDoc struct {
	set                         *rules.Set
	rules, clients, defaultPlan bool
}

// decodeApplyDoc decodes a POST /apply body; its error is the answer.
func decodeApplyDoc(body []byte) (applyDoc, error) {
	doc := new(rules.Set)
	err := rulewire.DecodeSetJSON(body, doc)
	if err != nil {
		var fe *rules.FieldError
		if errors.As(err, &fe) {
			return applyDoc{}, invalid("%s", fe.Error())
		}
		if looksLikeYAML(body) {
			return applyDoc{}, invalid("body: %v; this looks like YAML, and POST /apply takes JSON: send a rules file with sluice rules apply -f FILE, which reads YAML", err)
		}
		return applyDoc{}, invalid("body: %v", err)
	}
	var present map[string]json.RawMessage
	json.Unmarshal(body, &present) // valid JSON: rulewire.DecodeSetJSON read it
	has := func(key string) bool {
		raw, ok := present[key]
		return ok && !bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
	}
	return applyDoc{set: doc, rules: has("rules"), clients: has("clients"), defaultPlan: has("default_plan")}, nil
}

// merge replaces the parts of set the document has.
func (d applyDoc) merge(set *rules.Set) {
	if d.rules {
		set.Rules = slices.Clone(d.set.Rules)
	}
	if d.clients {
		set.Clients = d.set.Clients
	}
	if d.defaultPlan {
		set.DefaultPlan = d.set.DefaultPlan
	}
}

// looksLikeYAML reports whether a body that is not JSON starts as a rules
// file does: a comment, a document marker or a key and a colon.
func looksLikeYAML(b []byte) bool {
	t := strings.TrimSpace(string(b))
	if strings.HasPrefix(t, "#") || strings.HasPrefix(t, "---") {
		return true
	}
	key, _, ok := strings.Cut(t, ":")
	return ok && key != "" && !strings.ContainsAny(key, "{}[]\"\n")
}
