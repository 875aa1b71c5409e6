// Package client is a Go client of sluice's decision API (POST
// /ratelimit/check and POST /ratelimit/reserve, described in docs/api.md),
// and Transport, an http.RoundTripper that paces a program's calls to
// other services by sluice's decisions.
//
//	c := client.New("http://127.0.0.1:8080")
//	d, err := c.Check(ctx, client.CheckRequest{User: "alice", Endpoint: "GET /api/orders"})
//
// The admin API that reads and changes the rules is for operators: the
// `sluice rules` commands call it, and docs/api.md describes it for any
// HTTP client.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/seam/clientcall"
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
// decision API requires when sluice runs with --data-token.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient makes the Client send its requests with hc (for timeouts,
// TLS, proxies): for a sluice served with --tls-cert,
// an https:// base URL and, unless a CA the system trusts signed its
// certificate, a Transport whose TLSClientConfig holds that CA in RootCAs
// (and a client certificate for mutual TLS). The default is
// http.DefaultClient.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// New returns a Client of the service at baseURL, e.g.
// "http://127.0.0.1:8080"; a trailing slash is ignored.
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

func init() {
	clientcall.Do = func(c any, ctx context.Context, method, path string, in, out any) (http.Header, error) {
		return c.(*Client).do(ctx, method, path, in, out)
	}
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
