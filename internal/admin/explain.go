package admin

import (
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/adminclient"
	"github.com/sluicehq/sluice/internal/console"
	"github.com/sluicehq/sluice/internal/descriptor"
	"github.com/sluicehq/sluice/limiter"
)

// explain handles POST /explain: which rules a call matches, the bucket
// each would take from and its state, and the decision sluice would make
// now — read without taking anything.
func (s *server) explain(w http.ResponseWriter, r *http.Request) error {
	if s.console == nil || s.console.Limiter == nil {
		return notFound("POST /explain needs the decision engine: it is served by sluice serve's admin API")
	}
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	var eb adminclient.ExplainRequest
	if err := decodeStrict(body, &eb); err != nil {
		return err
	}
	req, err := explainRequest(&eb)
	if err != nil {
		return err
	}
	ix := s.console.Limiter.Rules()
	ex, err := s.console.Limiter.Explain(r.Context(), &req)
	if err != nil {
		return err
	}
	out := adminclient.Explanation{Plan: ex.Plan, Matched: ex.Matched, Buckets: []adminclient.ExplainBucket{},
		Note: "read without taking: the buckets are as they are now, and this call was not counted"}
	if ix != nil {
		out.Revision = ix.Revision()
	}
	if out.Matched == nil {
		out.Matched = []string{}
	}
	for _, b := range ex.Buckets {
		eb := adminclient.ExplainBucket{Rule: b.Rule, Bucket: displayClient(b.Client), Shadow: b.Shadow, Limit: b.Limit,
			Remaining: b.Result.Remaining, ResetAfter: secs(b.Result.ResetAfter), Allows: b.Allows}
		if !b.Allows {
			eb.Reason, eb.RetryAfter = b.Result.Reason.String(), secs(b.Result.RetryAfter)
		}
		out.Buckets = append(out.Buckets, eb)
	}
	d := &ex.Decision
	out.Decision.Allowed, out.Decision.Rule, out.Decision.Remaining = d.Allowed, d.RuleID(), d.Remaining
	out.Decision.Source = d.Origin.String()
	if !d.Allowed {
		out.Decision.Reason = d.Reason.String()
		out.Decision.RetryAfter = d.RetryAfter.Seconds()
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func secs(us int64) float64 { return (time.Duration(us) * time.Microsecond).Seconds() }

// explainRequest is the limiter.Request of an explain body.
func explainRequest(eb *adminclient.ExplainRequest) (limiter.Request, error) {
	req := limiter.Request{User: eb.User, APIKey: eb.APIKey, IP: eb.IP, Method: eb.Method, Path: eb.Path,
		Plan: eb.Plan, Cost: eb.Cost}
	if eb.Cost < 0 {
		return req, invalid("cost: want ≥ 0 (0 means 1), got %d", eb.Cost)
	}
	if len(eb.Headers) > 0 {
		req.Header = http.Header{}
		for k, v := range eb.Headers {
			req.Header.Set(k, v)
		}
	}
	for i, e := range eb.Entries {
		if e.Key == "" {
			return req, invalid("entries[%d].key: required", i)
		}
		var p *string
		switch e.Key {
		case "user":
			p = &req.User
		case "api_key":
			p = &req.APIKey
		case "remote_address", "ip":
			p = &req.IP
		case "plan":
			p = &req.Plan
		case "method":
			p = &req.Method
		case "path":
			p = &req.Path
		}
		if p != nil && *p == "" {
			*p = e.Value
		}
	}
	if len(eb.Entries) > 0 {
		descriptor.Attach(&req, &descriptor.Descriptor{Entries: eb.Entries})
	}
	if req.User == "" && req.APIKey == "" && req.IP == "" && len(eb.Entries) == 0 {
		return req, invalid("user, api_key, ip: give at least one, the caller to explain (or an Envoy descriptor's entries)")
	}
	if req.Method != "" && req.Path == "" {
		req.Path = "/"
	}
	req.Method = strings.ToUpper(req.Method)
	return req, nil
}

func displayClient(id string) string { return console.Display(id) }
