package client

import (
	"context"

	"github.com/sluicehq/sluice/rules"
)

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
}

// Explanation is the admin API's answer to an ExplainRequest: the rules
// the call matches, each bucket it would take from with its state, and
// the decision sluice would make now. Nothing was taken.
type Explanation struct {
	Revision int64           `json:"revision"`
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
	Note string `json:"note"`
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
