package client

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// ReserveRequest is the body of POST /ratelimit/reserve: a CheckRequest and
// the longest the caller will wait for its slot. MaxWaitMS 0 takes a slot
// only when the budget has room now.
type ReserveRequest struct {
	CheckRequest
	MaxWaitMS int64 `json:"max_wait_ms"`
}

// ReserveResponse is a reservation: a CheckResponse and the slot. Allowed:
// the units are taken and the call may be sent WaitMS from now (0: at
// once), that is at SendAtUS on the store's clock. Not allowed: nothing was
// taken, and RetryAfterMS says when a reservation with the same
// max_wait_ms could be granted (0 when it never can, see Reason).
type ReserveResponse struct {
	CheckResponse
	WaitMS int64 `json:"wait_ms"`
	// SendAtUS is the slot, as Unix time in microseconds on the store's
	// clock (0 when not allowed, and from a sluice older than this field).
	SendAtUS int64 `json:"send_at_us"`
}

// Reserve asks the data plane for a slot of a budget: the units are taken
// now for a call to be sent after WaitMS, or, when the wait would exceed
// MaxWaitMS, nothing is taken. A refusal is a ReserveResponse with Allowed
// false, not an error.
func (c *Client) Reserve(ctx context.Context, r ReserveRequest) (*ReserveResponse, error) {
	return decide[ReserveResponse](ctx, c, "/ratelimit/reserve", r)
}

// Budget is a budget shared through a sluice data plane, for a Transport:
// before each call the Transport reserves a slot from it and sleeps until
// the slot, so that every process calling through the same budget together
// stays within the rule's rate. The slot is the answer's send_at_us, on the
// store's clock; the Budget learns how far that clock is from the
// Transport's from the answers (see clockOffset), so that calls keep the
// slots' spacing whatever each answer's delay. Use a Budget by pointer and
// do not copy it once used.
type Budget struct {
	// Sluice is the data plane that keeps the budget.
	Sluice *Client
	// For names the budget of an outgoing call. Default: the call's host
	// (host:port) as user, on plan "egress":
	//
	//	ReserveRequest{CheckRequest: CheckRequest{User: req.URL.Host, Plan: "egress"}}
	//
	// so a rule with match.plan "egress" and by "user" gives each host a
	// budget of its own. MaxWaitMS is set by the Transport (its MaxWait, or
	// less when the request's context ends sooner).
	For func(req *http.Request) ReserveRequest

	offset clockOffset // the store's clock against the Transport's
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
		r = ReserveRequest{CheckRequest: CheckRequest{User: req.URL.Host, Plan: "egress"}}
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
	sent := t.clock()
	res, err := b.Sluice.Reserve(ctx, r)
	if err != nil {
		return fmt.Errorf("client: call to %s not sent: reserve: %w", req.URL.Host, err)
	}
	recv := t.clock()
	if !res.Allowed {
		return &BudgetError{Host: req.URL.Host, Reservation: res}
	}
	wait := time.Duration(res.WaitMS) * time.Millisecond
	// The slot, on the local clock: the answer's send_at_us, moved by the
	// offset between the store's clock and ours. Sleeping wait_ms from
	// when the answer arrived would send each call late by the answer's
	// own delay, different for every call, and so bunch calls the store
	// spaced evenly.
	until := recv.Add(wait)
	if res.SendAtUS > 0 {
		until = b.offset.local(time.UnixMicro(res.SendAtUS), wait, sent, recv)
	}
	// The units are taken: a context that ends now loses them (the server
	// keeps no record of who holds a slot; see docs).
	if d := until.Sub(t.clock()); d > 0 {
		return t.wait(ctx, d)
	}
	return nil
}

// clockOffset estimates θ, how far the store's clock is ahead of the local
// one, from the reservations' answers, as NTP does from its exchanges. An
// answer asked at local instant `sent` and received at `recv` was decided
// in between, at store instant D = send_at_us − the exact wait; wait_ms is
// that wait rounded up to the millisecond, so D lies in [slot − wait_ms,
// slot − wait_ms + 1 ms) (exactly slot − wait_ms when wait_ms is 0), and θ
// in [D − recv, D − sent]. The estimate is the intersection of those
// intervals over the answers (a new interval that misses it, because a
// clock was stepped or drifted, starts it afresh), and θ is the value in it
// closest to 0: on one machine, where the clocks are one, every interval
// holds 0 and the slot is kept to the microsecond; across machines, θ is
// one value for every call, so the slots' spacing is kept, off by at most
// the narrowest round trip seen (plus the millisecond of rounding).
//
// Safe for concurrent use; the zero value knows nothing.
type clockOffset struct {
	mu     sync.Mutex
	known  bool
	lo, hi time.Duration
}

// local returns the local instant of the slot sendAt (store clock) of an
// answer with wait wait, asked at sent and received at recv (local clock).
func (o *clockOffset) local(sendAt time.Time, wait time.Duration, sent, recv time.Time) time.Time {
	d := sendAt.Add(-wait) // the decision's earliest store instant
	lo, hi := d.Sub(recv), d.Sub(sent)
	if wait > 0 {
		hi += time.Millisecond
	}
	o.mu.Lock()
	if o.known && lo <= o.hi && o.lo <= hi {
		lo, hi = max(lo, o.lo), min(hi, o.hi)
	}
	o.known, o.lo, o.hi = true, lo, hi
	theta := min(max(0, lo), hi)
	o.mu.Unlock()
	// Never outside what this answer allows, [sent + wait − 1 ms, recv +
	// wait], even for a send_at_us so far off that durations saturate.
	early, late := sent.Add(wait-time.Millisecond), recv.Add(wait)
	if wait == 0 {
		early = sent
	}
	at := sendAt.Add(-theta)
	if at.Before(early) {
		return early
	}
	if at.After(late) {
		return late
	}
	return at
}
