// Package adminclient is sluice's client of its own admin API: the rules
// and the client registry read and changed, a whole set applied, a call
// or a whole Envoy request explained. The `sluice rules` commands use it; it sends its requests
// through a client.Client, so it takes client's options (WithToken,
// WithHTTPClient) and answers a non-2xx status with a *client.Error.
// The admin API itself is described in docs/api.md.
package adminclient

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/seam/clientcall"
	"github.com/sluicehq/sluice/rules"
)

// Client calls one sluice admin API. It is safe for concurrent use.
type Client struct {
	c *client.Client
}

// New returns a Client of the admin API at baseURL, e.g.
// "http://127.0.0.1:9090"; a trailing slash is ignored.
func New(baseURL string, opts ...client.Option) *Client {
	return &Client{c: client.New(baseURL, opts...)}
}

// IsNotFound reports whether err is a *client.Error with status 404: a
// rule or client id the admin API does not know.
func IsNotFound(err error) bool {
	var e *client.Error
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) (http.Header, error) {
	return clientcall.Do(c.c, ctx, method, path, in, out)
}

// revisionOf returns the revision an admin answer reports: its ETag
// ("<revision>"), else the "revision" of its body.
func revisionOf(h http.Header, body int64) int64 {
	etag := strings.TrimPrefix(h.Get("ETag"), "W/")
	if n, err := strconv.ParseInt(strings.Trim(etag, `"`), 10, 64); err == nil {
		return n
	}
	return body
}

// ruleList is the answer of GET /rules and GET /clients.
type ruleList struct {
	Revision    int64                   `json:"revision"`
	DefaultPlan string                  `json:"default_plan"`
	Rules       []rules.Rule            `json:"rules"`
	Clients     map[string]rules.Client `json:"clients"`
}

func (c *Client) list(ctx context.Context, path string) (*rules.Set, error) {
	var l ruleList
	h, err := c.do(ctx, http.MethodGet, path, nil, &l)
	if err != nil {
		return nil, err
	}
	return &rules.Set{Revision: revisionOf(h, l.Revision), DefaultPlan: l.DefaultPlan, Rules: l.Rules, Clients: l.Clients}, nil
}

// revisionBody is the answer of the admin API's writes.
type revisionBody struct {
	Revision int64 `json:"revision"`
}

func (c *Client) write(ctx context.Context, method, path string, in any) (int64, error) {
	var out revisionBody
	h, err := c.do(ctx, method, path, in, &out)
	if err != nil {
		return 0, err
	}
	return revisionOf(h, out.Revision), nil
}

// ListRules returns the rules in force, with the revision and default plan.
// The Set's Clients is nil: see ListClients.
func (c *Client) ListRules(ctx context.Context) (*rules.Set, error) {
	return c.list(ctx, "/rules")
}

// GetRule returns the rule id; an unknown id is a *client.Error with
// status 404 (see IsNotFound).
func (c *Client) GetRule(ctx context.Context, id string) (*rules.Rule, error) {
	var r rules.Rule
	if _, err := c.do(ctx, http.MethodGet, "/rules/"+url.PathEscape(id), nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// PutRule creates r or replaces the rule with its ID, and returns the new
// revision. An invalid rule is a *client.Error with status 400 whose
// Message names the field.
func (c *Client) PutRule(ctx context.Context, r rules.Rule) (revision int64, err error) {
	if r.ID == "" {
		return 0, errors.New("adminclient: PutRule: the rule has no id")
	}
	return c.write(ctx, http.MethodPut, "/rules/"+url.PathEscape(r.ID), r)
}

// DeleteRule deletes the rule id; an unknown id is a *client.Error with
// status 404.
func (c *Client) DeleteRule(ctx context.Context, id string) error {
	_, err := c.write(ctx, http.MethodDelete, "/rules/"+url.PathEscape(id), nil)
	return err
}

// ListClients returns the client registry (client id → plan), with the
// revision and default plan. The Set's Rules is nil: see ListRules.
func (c *Client) ListClients(ctx context.Context) (*rules.Set, error) {
	return c.list(ctx, "/clients")
}

// GetClient returns the registry entry of a client id ("user:alice",
// "api_key:k_live_42", "ip:203.0.113.7"); an unknown id is a *client.Error with
// status 404.
func (c *Client) GetClient(ctx context.Context, id string) (*rules.Client, error) {
	var cl rules.Client
	if _, err := c.do(ctx, http.MethodGet, "/clients/"+url.PathEscape(id), nil, &cl); err != nil {
		return nil, err
	}
	return &cl, nil
}

// PutClient puts the client id on plan cl.Plan and returns the new revision.
func (c *Client) PutClient(ctx context.Context, id string, cl rules.Client) (revision int64, err error) {
	return c.write(ctx, http.MethodPut, "/clients/"+url.PathEscape(id), cl)
}

// DeleteClient removes the client id from the registry (it falls back to the
// default plan); an unknown id is a *client.Error with status 404.
func (c *Client) DeleteClient(ctx context.Context, id string) error {
	_, err := c.write(ctx, http.MethodDelete, "/clients/"+url.PathEscape(id), nil)
	return err
}

// ApplyResult is the answer of Apply.
type ApplyResult struct {
	Revision int64    `json:"revision"` // after the apply; the current one for a dry run
	DryRun   bool     `json:"dry_run"`
	Changes  []Change `json:"changes"` // empty when the set was already in force
}

// Change is one difference Apply made (or, in a dry run, would make).
type Change struct {
	Op   string `json:"op"`           // "create", "update" or "delete"
	Kind string `json:"kind"`         // "rule", "client" or "default_plan"
	ID   string `json:"id,omitempty"` // the rule or client id; "" for the default plan
	// Before and After are the JSON of the old and new value: a rule, a
	// client ({"plan": ...}) or, for the default plan, a string. Before is
	// empty for a create, After for a delete.
	Before json.RawMessage `json:"before,omitempty"`
	After  json.RawMessage `json:"after,omitempty"`
}

// applyDoc is the body of POST /apply.
type applyDoc struct {
	Rules       []rules.Rule             `json:"rules"`
	Clients     *map[string]rules.Client `json:"clients,omitempty"`
	DefaultPlan string                   `json:"default_plan,omitempty"`
}

// Apply makes the service's rules what s says, in one change with one new
// revision: rules not in s are deleted, new ones created, changed ones
// updated (s.Rules is always the complete list; nil means no rules). The
// client registry is replaced by s.Clients when it is not nil (an empty map
// empties it) and left alone when nil; the default plan is set when
// s.DefaultPlan is not empty and left alone otherwise. s.Revision is not
// sent. With dryRun, nothing changes and the result lists what would.
func (c *Client) Apply(ctx context.Context, s *rules.Set, dryRun bool) (*ApplyResult, error) {
	doc := applyDoc{Rules: s.Rules, DefaultPlan: s.DefaultPlan}
	if doc.Rules == nil {
		doc.Rules = []rules.Rule{}
	}
	if s.Clients != nil {
		doc.Clients = &s.Clients
	}
	path := "/apply"
	if dryRun {
		path += "?dry_run=true"
	}
	var out ApplyResult
	h, err := c.do(ctx, http.MethodPost, path, doc, &out)
	if err != nil {
		return nil, err
	}
	out.Revision = revisionOf(h, out.Revision)
	return &out, nil
}

// ExplainRequest is a call to explain (POST /explain of the admin API):
// the caller (at least one of User, APIKey, IP, or Envoy descriptor
// Entries), the endpoint, headers and cost as the call would give them.
// The admin API reads its body into this type, strictly: one definition
// of the wire form for both ends.
type ExplainRequest struct {
	User    string            `json:"user,omitempty"`
	APIKey  string            `json:"api_key,omitempty"`
	IP      string            `json:"ip,omitempty"`
	Method  string            `json:"method,omitempty"`
	Path    string            `json:"path,omitempty"`
	Plan    string            `json:"plan,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Cost    int64             `json:"cost,omitempty"`
	// Entries are one Envoy descriptor's entries: the keys user, api_key,
	// remote_address (or ip), plan, method and path fill the fields above
	// that are empty, as the Envoy API reads them, and every entry is
	// what rules on match.entries and keyed by entry:<key> read.
	Entries []rules.Entry `json:"entries,omitempty"`

	// Domain, Descriptors and HitsAddend are a whole Envoy ShouldRateLimit
	// request instead (then every field above is left out): each
	// descriptor is explained as the Envoy API would decide it, and the
	// answer is an EnvoyExplanation (see ExplainEnvoy).
	Domain      string            `json:"domain,omitempty"`
	Descriptors []EnvoyDescriptor `json:"descriptors,omitempty"`
	HitsAddend  uint32            `json:"hits_addend,omitempty"`
}

// EnvoyDescriptor is one descriptor of an Envoy request to explain.
type EnvoyDescriptor struct {
	Entries []rules.Entry `json:"entries"`
	// Limit is the descriptor's own limit (Envoy's dynamic limits).
	Limit *EnvoyLimit `json:"limit,omitempty"`
	// HitsAddend is the descriptor's own hits_addend, when set.
	HitsAddend *uint64 `json:"hits_addend,omitempty"`
}

// EnvoyLimit is a descriptor's own limit: RequestsPerUnit calls a Unit,
// one of SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR.
type EnvoyLimit struct {
	RequestsPerUnit uint32 `json:"requests_per_unit"`
	Unit            string `json:"unit"`
}

// Explanation is the admin API's answer to an ExplainRequest: the rules
// the call matches, each bucket it would take from with its state, and
// the decision sluice would make now. Nothing was taken.
type Explanation struct {
	Revision int64 `json:"revision"`
	Check
	Note string `json:"note"`
}

// Check is one check explained: the plan, the rules matched, each bucket
// with its state, and the decision. An Explanation is one; an
// EnvoyExplanation has one per descriptor (or group of descriptors the
// Envoy API unites into one check).
type Check struct {
	Plan     string          `json:"plan"`
	Matched  []string        `json:"matched"`
	Buckets  []ExplainBucket `json:"buckets"`
	Decision struct {
		Allowed    bool    `json:"allowed"`
		Rule       string  `json:"rule,omitempty"`
		Reason     string  `json:"reason,omitempty"`
		Remaining  int64   `json:"remaining"`
		RetryAfter float64 `json:"retry_after_s,omitempty"`
		Source     string  `json:"source"`
	} `json:"decision"`
}

// EnvoyExplanation is the admin API's answer to an ExplainRequest of a
// whole Envoy request: the overall code, and one check per descriptor, or
// per group of descriptors the Envoy API unites into one check. Nothing
// was taken.
type EnvoyExplanation struct {
	Revision    int64        `json:"revision"`
	Domain      string       `json:"domain"`
	OverallCode string       `json:"overall_code"` // OK or OVER_LIMIT
	Checks      []EnvoyCheck `json:"checks"`
	Note        string       `json:"note"`
}

// EnvoyCheck is one check of an EnvoyExplanation.
type EnvoyCheck struct {
	Descriptors []int  `json:"descriptors"` // indexes into the request's descriptors
	Code        string `json:"code"`        // OK or OVER_LIMIT
	Empty       bool   `json:"empty,omitempty"`
	Check
}

// ExplainBucket is one bucket of an Explanation: its rule, the bucket's
// client as an operator recognises it (never a secret), its state now,
// and whether it would allow the call (if not, why and for how long).
type ExplainBucket struct {
	Rule       string  `json:"rule"`
	Bucket     string  `json:"bucket"`
	Shadow     bool    `json:"shadow,omitempty"`
	Limit      int64   `json:"limit"`
	Remaining  int64   `json:"remaining"`
	ResetAfter float64 `json:"reset_after_s"`
	Allows     bool    `json:"allows"`
	RetryAfter float64 `json:"retry_after_s,omitempty"`
	Reason     string  `json:"reason,omitempty"`
}

// Explain asks the admin API which rules r matches and what sluice would
// decide for it now, without taking anything (POST /explain).
func (c *Client) Explain(ctx context.Context, r ExplainRequest) (*Explanation, error) {
	var out Explanation
	if _, err := c.do(ctx, "POST", "/explain", r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ExplainEnvoy asks the admin API what the Envoy API would answer the
// Envoy request r (its Domain and Descriptors) now, without taking
// anything (POST /explain).
func (c *Client) ExplainEnvoy(ctx context.Context, r ExplainRequest) (*EnvoyExplanation, error) {
	var out EnvoyExplanation
	if _, err := c.do(ctx, http.MethodPost, "/explain", r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
