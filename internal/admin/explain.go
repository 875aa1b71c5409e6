package admin

import (
	"net/http"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/adminclient"
	"github.com/sluicehq/sluice/internal/console"
	"github.com/sluicehq/sluice/internal/seam/descriptor"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
)

const explainNote = "read without taking: the buckets are as they are now, and this call was not counted"

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
	if len(eb.Descriptors) > 0 || eb.Domain != "" {
		return s.explainEnvoy(w, r, &eb)
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
	writeJSON(w, http.StatusOK, adminclient.Explanation{Revision: revisionOf(ix), Check: render(&ex), Note: explainNote})
	return nil
}

// explainEnvoy explains a ShouldRateLimit request through the Envoy API's
// own planning (rls.Server.Explain).
func (s *server) explainEnvoy(w http.ResponseWriter, r *http.Request, eb *adminclient.ExplainRequest) error {
	if s.console.Envoy == nil {
		return notFound("descriptors: this admin API serves no Envoy API to explain them by; sluice serve's does")
	}
	if eb.User != "" || eb.APIKey != "" || eb.IP != "" || eb.Method != "" || eb.Path != "" || eb.Plan != "" ||
		len(eb.Headers) > 0 || eb.Cost != 0 || len(eb.Entries) > 0 {
		return invalid("domain, descriptors: an Envoy request stands alone; leave out user, api_key, ip, method, path, plan, headers, cost and entries (each descriptor's entries carry them)")
	}
	req := &rlsv3.RateLimitRequest{Domain: eb.Domain, HitsAddend: eb.HitsAddend}
	for i, d := range eb.Descriptors {
		rd := &ratelimitv3.RateLimitDescriptor{}
		for _, e := range d.Entries {
			rd.Entries = append(rd.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
		}
		if l := d.Limit; l != nil {
			u, ok := typev3.RateLimitUnit_value[strings.ToUpper(l.Unit)]
			if strings.EqualFold(l.Unit, "WEEK") {
				u, ok = 7, true
			}
			if !ok || u == 0 {
				return invalid("descriptors[%d].limit.unit: want SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR, got %q", i, l.Unit)
			}
			rd.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: l.RequestsPerUnit, Unit: typev3.RateLimitUnit(u)}
		}
		if d.HitsAddend != nil {
			rd.HitsAddend = wrapperspb.UInt64(*d.HitsAddend)
		}
		req.Descriptors = append(req.Descriptors, rd)
	}
	ix := s.console.Limiter.Rules()
	checks, over, err := s.console.Envoy.Explain(r.Context(), req)
	if err != nil {
		if st, ok := status.FromError(err); ok && st.Code() == codes.InvalidArgument {
			return invalid("%s", strings.TrimPrefix(st.Message(), "rls: "))
		}
		return err
	}
	out := adminclient.EnvoyExplanation{Revision: revisionOf(ix), Domain: eb.Domain, OverallCode: "OK",
		Checks: []adminclient.EnvoyCheck{}, Note: explainNote}
	if over {
		out.OverallCode = "OVER_LIMIT"
	}
	for _, c := range checks {
		ec := adminclient.EnvoyCheck{Descriptors: c.Descriptors, Code: "OK", Empty: c.Empty}
		if !c.Empty {
			ec.Check = render(&c.Explanation)
			if c.Over {
				ec.Code = "OVER_LIMIT"
			}
		} else {
			ec.Matched, ec.Buckets = []string{}, []adminclient.ExplainBucket{}
			ec.Decision.Allowed = true
		}
		out.Checks = append(out.Checks, ec)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func revisionOf(ix *rules.Index) int64 {
	if ix == nil {
		return 0
	}
	return ix.Revision()
}

// render is ex as the admin API answers it.
func render(ex *limiter.Explanation) adminclient.Check {
	out := adminclient.Check{Plan: ex.Plan, Matched: ex.Matched, Buckets: []adminclient.ExplainBucket{}}
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
	return out
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
