package client

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// ReserveRequest is the body of POST /ratelimit/reserve: a CheckRequest and
// the longest the caller will wait for its slot. MaxWaitMS 0 takes a slot
// only when the budget has room now.
type ReserveRequest struct {
	User      string `json:"user,omitempty"`
	APIKey    string `json:"api_key,omitempty"`
	IP        string `json:"ip,omitempty"`
	Plan      string `json:"plan,omitempty"`
	Endpoint  string `json:"endpoint,omitempty"`
	Cost      int64  `json:"cost,omitempty"`
	MaxWaitMS int64  `json:"max_wait_ms"`
}

// ReserveResponse is a reservation. Allowed: the units are taken and the
// call may be sent WaitMS from now (0: at once). Not allowed: nothing was
// taken, and RetryAfterMS says when a reservation with the same max_wait_ms
// could be granted (0 when it never can, see Reason).
type ReserveResponse struct {
	Allowed      bool    `json:"allowed"`
	WaitMS       int64   `json:"wait_ms"`
	Limit        int64   `json:"limit"`
	Remaining    int64   `json:"remaining"`
	ResetAfterMS int64   `json:"reset_after_ms"`
	RetryAfterMS int64   `json:"retry_after_ms"`
	Rule         *string `json:"rule"`
	Client       *string `json:"client"`
	Reason       string  `json:"reason,omitempty"`
}

// Reserve asks the data plane for a slot of a budget: the units are taken
// now for a call to be sent after WaitMS, or, when the wait would exceed
// MaxWaitMS, nothing is taken. A refusal is a ReserveResponse with Allowed
// false, not an error.
func (c *Client) Reserve(ctx context.Context, r ReserveRequest) (*ReserveResponse, error) {
	var out ReserveResponse
	if _, err := c.do(ctx, http.MethodPost, "/ratelimit/reserve", r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Budget is a budget shared through a sluice data plane, for a Transport:
// before each call the Transport reserves a slot from it and sleeps until
// the slot, so that every process calling through the same budget together
// stays within the rule's rate.
type Budget struct {
	// Sluice is the data plane that keeps the budget.
	Sluice *Client
	// For names the budget of an outgoing call. Default: the call's host
	// (host:port) as user, on plan "egress":
	//
	//	ReserveRequest{User: req.URL.Host, Plan: "egress"}
	//
	// so a rule with match.plan "egress" and by "user" gives each host a
	// budget of its own. MaxWaitMS is set by the Transport (its MaxWait, or
	// less when the request's context ends sooner).
	For func(req *http.Request) ReserveRequest
}

// BudgetError is the failure of a call the budget did not grant: it was not
// sent.
type BudgetError struct {
	Host string
	// Reservation is sluice's answer: a refusal, with RetryAfterMS.
	Reservation *ReserveResponse
}

func (e *BudgetError) Error() string {
	msg := fmt.Sprintf("client: call to %s not sent: the budget has no slot within the wait allowed", e.Host)
	if e.Reservation.Reason != "" {
		msg += " (" + e.Reservation.Reason + ")"
	}
	return msg + fmt.Sprintf("; retry after %d ms", e.Reservation.RetryAfterMS)
}

// acquire reserves req's slot and sleeps until it. It returns nil only when
// the budget granted the call and its slot has come.
func (b *Budget) acquire(ctx context.Context, t *Transport, req *http.Request) error {
	var r ReserveRequest
	if b.For != nil {
		r = b.For(req)
	} else {
		r = ReserveRequest{User: req.URL.Host, Plan: "egress"}
	}
	maxWait := t.MaxWait
	if dl, ok := ctx.Deadline(); ok {
		if d := dl.Sub(t.clock()); maxWait <= 0 || d < maxWait {
			maxWait = d
		}
	}
	if maxWait < 0 {
		maxWait = 0
	}
	r.MaxWaitMS = maxWait.Milliseconds()
	res, err := b.Sluice.Reserve(ctx, r)
	if err != nil {
		return fmt.Errorf("client: call to %s not sent: reserve: %w", req.URL.Host, err)
	}
	if !res.Allowed {
		return &BudgetError{Host: req.URL.Host, Reservation: res}
	}
	if res.WaitMS <= 0 {
		return nil
	}
	// The units are taken: a context that ends now loses them (the server
	// keeps no record of who holds a slot; see docs).
	return t.wait(ctx, time.Duration(res.WaitMS)*time.Millisecond)
}
