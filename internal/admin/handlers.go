package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/sluicehq/sluice/internal/rulecheck"
	"github.com/sluicehq/sluice/internal/seam/rulewire"
	"github.com/sluicehq/sluice/rules"
)

// current returns the rules in force as a Set (never nil) and its revision.
func (s *server) current() (*rules.Set, int64) {
	ix := s.src.Current()
	set := ix.Set()
	if set == nil {
		set = &rules.Set{}
	}
	return set, ix.Revision()
}

func (s *server) listRules(w http.ResponseWriter, r *http.Request) error {
	set, rev, err := s.setFor(r)
	if err != nil {
		return err
	}
	rs := set.Rules
	if rs == nil {
		rs = []rules.Rule{}
	}
	setRevision(w, rev)
	writeJSON(w, http.StatusOK, struct {
		Revision    int64        `json:"revision"`
		DefaultPlan string       `json:"default_plan"`
		Rules       []rules.Rule `json:"rules"`
	}{rev, set.DefaultPlan, rs})
	return nil
}

func (s *server) getRule(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	set, rev := s.current()
	i := ruleIndex(set, id)
	if i < 0 {
		return notFound("rule %q does not exist", id)
	}
	setRevision(w, rev)
	writeJSON(w, http.StatusOK, set.Rules[i])
	return nil
}

// putRule creates or replaces a rule. The body's "id" may be left out; when
// given it must be the path's.
func (s *server) putRule(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	ifRev, err := s.ifMatch(r)
	if err != nil {
		return err
	}
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	rule, err := decodeRule(body, id)
	if err != nil {
		return err
	}
	created := false
	ix, err := s.src.Update(r.Context(), ifRev, func(set *rules.Set) error {
		if i := ruleIndex(set, id); i >= 0 {
			set.Rules[i] = rule
			return nil
		}
		created = true
		set.Rules = append(set.Rules, rule)
		return nil
	})
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		w.Header().Set("Location", "/rules/"+id)
	}
	s.log.Info("admin: rule stored", "id", id, "created", created, "revision", ix.Revision())
	setRevision(w, ix.Revision())
	writeJSON(w, status, struct {
		Revision int64      `json:"revision"`
		Rule     rules.Rule `json:"rule"`
	}{ix.Revision(), rule})
	return nil
}

// decodeRule decodes a PUT /rules/{id} body, filling in the path's id when
// the body has none.
func decodeRule(body []byte, id string) (rules.Rule, error) {
	var probe map[string]json.RawMessage
	if json.Unmarshal(body, &probe) == nil && probe != nil {
		if _, ok := probe["id"]; !ok {
			// A valid JSON object without "id": insert the path's after its
			// "{", leaving the rest as sent (for the strict decoder to see
			// duplicate fields).
			i := bytes.IndexByte(body, '{')
			idJSON, _ := json.Marshal(id)
			b := make([]byte, 0, len(body)+len(idJSON)+6)
			b = append(b, body[:i+1]...)
			b = append(b, `"id":`...)
			b = append(b, idJSON...)
			if len(probe) > 0 {
				b = append(b, ',')
			}
			body = append(b, body[i+1:]...)
		}
	}
	var rule rules.Rule
	err := rulewire.DecodeRuleJSON(body, &rule)
	if err != nil {
		var fe *rules.FieldError
		if errors.As(err, &fe) {
			return rule, invalid("%s", fe.Error())
		}
		return rule, invalid("body: %v", err)
	}
	if rule.ID != id {
		return rule, invalid("id: %q in the body does not match %q in the path", rule.ID, id)
	}
	return rule, nil
}

func (s *server) deleteRule(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	ifRev, err := s.ifMatch(r)
	if err != nil {
		return err
	}
	ix, err := s.src.Update(r.Context(), ifRev, func(set *rules.Set) error {
		i := ruleIndex(set, id)
		if i < 0 {
			return notFound("rule %q does not exist", id)
		}
		set.Rules = append(set.Rules[:i], set.Rules[i+1:]...)
		return nil
	})
	if err != nil {
		return err
	}
	s.log.Info("admin: rule deleted", "id", id, "revision", ix.Revision())
	return writeRevision(w, ix.Revision())
}

func writeRevision(w http.ResponseWriter, rev int64) error {
	setRevision(w, rev)
	writeJSON(w, http.StatusOK, struct {
		Revision int64 `json:"revision"`
	}{rev})
	return nil
}

func ruleIndex(set *rules.Set, id string) int {
	for i := range set.Rules {
		if set.Rules[i].ID == id {
			return i
		}
	}
	return -1
}

func (s *server) listClients(w http.ResponseWriter, r *http.Request) error {
	set, rev, err := s.setFor(r)
	if err != nil {
		return err
	}
	cs := set.Clients
	if cs == nil {
		cs = map[string]rules.Client{}
	}
	setRevision(w, rev)
	writeJSON(w, http.StatusOK, struct {
		Revision    int64                   `json:"revision"`
		DefaultPlan string                  `json:"default_plan"`
		Clients     map[string]rules.Client `json:"clients"`
	}{rev, set.DefaultPlan, cs})
	return nil
}

func (s *server) getClient(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	set, rev := s.current()
	c, ok := set.Clients[id]
	if !ok {
		return notFound("client %q is not in the registry", id)
	}
	setRevision(w, rev)
	writeJSON(w, http.StatusOK, c)
	return nil
}

// planBody is the body of PUT /clients/{id} and PUT /default_plan.
type planBody struct {
	Plan *string `json:"plan"`
}

func (s *server) readPlan(w http.ResponseWriter, r *http.Request) (string, error) {
	body, err := s.readBody(w, r)
	if err != nil {
		return "", err
	}
	var pb planBody
	if err := decodeStrict(body, &pb); err != nil {
		return "", err
	}
	if pb.Plan == nil {
		return "", invalid(`plan: required, e.g. {"plan": "pro"}`)
	}
	return *pb.Plan, nil
}

func (s *server) putClient(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := rulecheck.ValidClientID(id); err != nil {
		return s.apiError(err)
	}
	ifRev, err := s.ifMatch(r)
	if err != nil {
		return err
	}
	plan, err := s.readPlan(w, r)
	if err != nil {
		return err
	}
	c := rules.Client{Plan: plan}
	if err := c.Validate(); err != nil {
		return s.apiError(err)
	}
	created := false
	ix, err := s.src.Update(r.Context(), ifRev, func(set *rules.Set) error {
		_, exists := set.Clients[id]
		created = !exists
		if set.Clients == nil {
			set.Clients = make(map[string]rules.Client)
		}
		set.Clients[id] = c
		return nil
	})
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	s.log.Info("admin: client stored", "client", id, "plan", plan, "created", created, "revision", ix.Revision())
	setRevision(w, ix.Revision())
	writeJSON(w, status, struct {
		Revision int64  `json:"revision"`
		ID       string `json:"id"`
		Plan     string `json:"plan"`
	}{ix.Revision(), id, plan})
	return nil
}

func (s *server) deleteClient(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	ifRev, err := s.ifMatch(r)
	if err != nil {
		return err
	}
	ix, err := s.src.Update(r.Context(), ifRev, func(set *rules.Set) error {
		if _, ok := set.Clients[id]; !ok {
			return notFound("client %q is not in the registry", id)
		}
		delete(set.Clients, id)
		if len(set.Clients) == 0 {
			set.Clients = nil
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.log.Info("admin: client deleted", "client", id, "revision", ix.Revision())
	return writeRevision(w, ix.Revision())
}

func (s *server) getDefaultPlan(w http.ResponseWriter, r *http.Request) error {
	set, rev := s.current()
	setRevision(w, rev)
	writeJSON(w, http.StatusOK, struct {
		Revision int64  `json:"revision"`
		Plan     string `json:"plan"`
	}{rev, set.DefaultPlan})
	return nil
}

// putDefaultPlan sets the plan of callers not in the registry; "" leaves
// them without a plan (only rules without match.plan apply to them).
func (s *server) putDefaultPlan(w http.ResponseWriter, r *http.Request) error {
	ifRev, err := s.ifMatch(r)
	if err != nil {
		return err
	}
	plan, err := s.readPlan(w, r)
	if err != nil {
		return err
	}
	ix, err := s.src.Update(r.Context(), ifRev, func(set *rules.Set) error {
		set.DefaultPlan = plan
		return nil
	})
	if err != nil {
		return err
	}
	s.log.Info("admin: default plan set", "plan", plan, "revision", ix.Revision())
	setRevision(w, ix.Revision())
	writeJSON(w, http.StatusOK, struct {
		Revision int64  `json:"revision"`
		Plan     string `json:"plan"`
	}{ix.Revision(), plan})
	return nil
}
