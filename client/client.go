// Package client is a Go client of sluice's HTTP APIs: the decision API of
// the data plane (POST /ratelimit/check) and the admin API that reads and
// changes the rules; both are described in docs/api.md.
//
//	c := client.New("http://127.0.0.1:8080")
//	d, err := c.Check(ctx, client.CheckRequest{User: "alice", Endpoint: "GET /api/orders"})
//
//	admin := client.New("http://127.0.0.1:9090", client.WithToken(token))
//	set, err := admin.ListRules(ctx)
//
// The data plane and the admin API listen on different addresses, so a
// program that uses both makes two Clients.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/rules"
)

// Client calls one sluice service. It is safe for concurrent use; make one
// per base URL and reuse it, so its connections are reused.
type Client struct {
	base  string // without a trailing slash
	token string
	hc    *http.Client
}

// Option configures a Client.
type Option func(*Client)

// WithToken sends "Authorization: Bearer <token>" with every request, as the
// admin API requires when sluice runs with --admin-token, and the decision
// API with --data-token.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient makes the Client send its requests with hc (for timeouts,
// TLS, proxies): for a sluice served with --tls-cert (or --admin-tls-cert),
// an https:// base URL and, unless a CA the system trusts signed its
// certificate, a Transport whose TLSClientConfig holds that CA in RootCAs
// (and a client certificate for mutual TLS). The default is
// http.DefaultClient.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// New returns a Client of the service at baseURL, e.g.
// "http://127.0.0.1:9090"; a trailing slash is ignored.
func New(baseURL string, opts ...Option) *Client {
	c := &Client{base: strings.TrimRight(baseURL, "/"), hc: http.DefaultClient}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Error is a non-2xx answer of the service. Code and Message come from the
// {"error", "message"} body; when the body is not of that form, Code is ""
// and Message is the start of the body or the status text.
type Error struct {
	Status  int    // HTTP status code
	Code    string // e.g. "invalid_request", "not_found", "unauthorized"
	Message string // what is wrong, as the server put it
}

func (e *Error) Error() string {
	return "sluice: " + strconv.Itoa(e.Status) + " " + e.Code + ": " + e.Message
}

// IsNotFound reports whether err is an *Error with status 404.
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}

// Limits on what the client reads from an answer.
const (
	maxBody      = 64 << 20 // a rule list; far above what the admin API accepts
	maxErrorBody = 64 << 10
)

// do sends a request with an optional JSON body and decodes a 2xx JSON
// answer into out (when not nil). It returns the answer's headers.
func (c *Client) do(ctx context.Context, method, path string, in, out any) (http.Header, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("client: encode %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.Header, readError(resp)
	}
	if out == nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody)) // keep the connection
		return resp.Header, nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: read answer: %w", method, path, err)
	}
	if len(b) > maxBody {
		return nil, fmt.Errorf("client: %s %s: answer larger than %d bytes", method, path, maxBody)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return nil, fmt.Errorf("client: %s %s: decode answer: %w", method, path, err)
	}
	return resp.Header, nil
}

// readError turns a non-2xx answer into an *Error.
func readError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e := &Error{Status: resp.StatusCode}
	var body struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &body) == nil && (body.Error != "" || body.Message != "") {
		e.Code, e.Message = body.Error, body.Message
		return e
	}
	e.Message = strings.TrimSpace(string(b))
	if len(e.Message) > 200 {
		e.Message = e.Message[:200] + "…"
	}
	if e.Message == "" {
		e.Message = http.StatusText(resp.StatusCode)
	}
	return e
}

// CheckRequest is the body of POST /ratelimit/check: at least one of User,
// APIKey and IP; Endpoint as "METHOD /path"; Plan and Cost optional (Cost 0
// is sent as absent, which the service takes as 1).
type CheckRequest struct {
	User     string `json:"user,omitempty"`
	APIKey   string `json:"api_key,omitempty"`
	IP       string `json:"ip,omitempty"`
	Plan     string `json:"plan,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
	Cost     int64  `json:"cost,omitempty"`
}

// CheckResponse is a decision. Limit, Remaining and ResetAfterMS describe
// the most restrictive matching rule (the one that denied, if any); Rule and
// Client are nil when no rule matched (the call is then allowed).
type CheckResponse struct {
	Allowed      bool    `json:"allowed"`
	Limit        int64   `json:"limit"`
	Remaining    int64   `json:"remaining"`
	ResetAfterMS int64   `json:"reset_after_ms"`
	RetryAfterMS int64   `json:"retry_after_ms"` // 0 when allowed
	Rule         *string `json:"rule"`
	Client       *string `json:"client"`
	// Reason says why a call was denied when it is not simply over the
	// limit, e.g. "cost_exceeds_capacity" (it can never pass).
	Reason string `json:"reason,omitempty"`
	// ShadowDenied names a shadow rule that would have denied the call.
	ShadowDenied string `json:"shadow_denied,omitempty"`
}

// Check asks the data plane for a decision on one call. A denied call is a
// CheckResponse with Allowed false, not an error.
func (c *Client) Check(ctx context.Context, r CheckRequest) (*CheckResponse, error) {
	return decide[CheckResponse](ctx, c, "/ratelimit/check", r)
}

// decide posts a request of the decision API to path and returns the
// answer, a *CheckResponse or a *ReserveResponse.
func decide[T any](ctx context.Context, c *Client, path string, r any) (*T, error) {
	var out T
	if _, err := c.do(ctx, http.MethodPost, path, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
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

// GetRule returns the rule id; an unknown id is an *Error with status 404
// (see IsNotFound).
func (c *Client) GetRule(ctx context.Context, id string) (*rules.Rule, error) {
	var r rules.Rule
	if _, err := c.do(ctx, http.MethodGet, "/rules/"+url.PathEscape(id), nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// PutRule creates r or replaces the rule with its ID, and returns the new
// revision. An invalid rule is an *Error with status 400 whose Message names
// the field.
func (c *Client) PutRule(ctx context.Context, r rules.Rule) (revision int64, err error) {
	if r.ID == "" {
		return 0, errors.New("client: PutRule: the rule has no id")
	}
	return c.write(ctx, http.MethodPut, "/rules/"+url.PathEscape(r.ID), r)
}

// DeleteRule deletes the rule id; an unknown id is an *Error with status 404.
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
// "api_key:k_live_42", "ip:203.0.113.7"); an unknown id is an *Error with
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
// default plan); an unknown id is an *Error with status 404.
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
