package client

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Transport is an http.RoundTripper for calls to other APIs that paces them
// instead of running into their limits. It wraps another RoundTripper (Base)
// and, per host (the request URL's host:port):
//
//   - reads the limit an answer advertises: Retry-After on a 429 or 503; the
//     IETF RateLimit and RateLimit-Policy fields; RateLimit-Remaining with
//     RateLimit-Reset; and X-RateLimit-Remaining with X-RateLimit-Reset;
//   - when an answer says nothing remains (a remaining of 0, or a 429 or 503
//     with a Retry-After or a reset), holds every further call to that host
//     until the advertised instant: nothing is sent to it before then;
//   - retries a 429 or 503 that carries a Retry-After, after that delay, at
//     most MaxRetries times, and only for an idempotent request (GET, HEAD,
//     OPTIONS, TRACE, PUT, DELETE, or any request with an Idempotency-Key or
//     X-Idempotency-Key header) whose body can be sent again (no body, or
//     GetBody set, as http.NewRequest does for in-memory bodies);
//   - when Budget is set, reserves a slot of a shared sluice budget before
//     each call and sleeps until it (see Budget).
//
// Every wait honours the request's context: a wait that cannot end before
// the context's deadline is not started, and a context that ends while
// waiting ends the wait; either way the call is not sent and RoundTrip
// returns the context's error (or a *HoldError). A wait longer than MaxWait
// is not started either: the call fails at once with a *HoldError.
//
// Use NewTransport; a Transport is safe for concurrent use and should be
// reused, as its holds are what it has learnt about each host.
type Transport struct {
	// Base sends the calls. Default http.DefaultTransport.
	Base http.RoundTripper
	// MaxRetries bounds the retries of one call after a 429 or 503 with a
	// Retry-After. Default 2; 0 never retries (the answer is returned).
	MaxRetries int
	// MaxWait is the longest one call waits, for a host's hold, a retry or
	// a budget slot. Default one minute: an API that advertises an hour
	// fails calls at once with a *HoldError rather than holding goroutines
	// for an hour.
	MaxWait time.Duration
	// Budget, when not nil, is a shared sluice budget every call reserves
	// from before it is sent.
	Budget *Budget

	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error

	mu    sync.Mutex
	holds map[string]time.Time // host → nothing is sent to it before this instant
}

// NewTransport returns a Transport over base (nil: http.DefaultTransport)
// with the defaults: MaxRetries 2, MaxWait one minute, no Budget.
func NewTransport(base http.RoundTripper) *Transport {
	return &Transport{Base: base, MaxRetries: 2, MaxWait: time.Minute}
}

// maxHold caps what an answer can make the Transport hold a host for.
const maxHold = 24 * time.Hour

// HoldError is the failure of a call that was not sent because it would
// have had to wait longer than MaxWait, or past its context's deadline.
type HoldError struct {
	Host  string    // the request's host
	Until time.Time // when the call could have been sent
	// Reason names what held it: "rate limit of the host" (its answers) or
	// "budget" (the sluice budget).
	Reason string
	Limit  string // what the wait exceeded: "MaxWait 1m0s" or "the context's deadline"
}

func (e *HoldError) Error() string {
	return fmt.Sprintf("client: call to %s not sent: the %s holds it until %s, beyond %s",
		e.Host, e.Reason, e.Until.UTC().Format(time.RFC3339Nano), e.Limit)
}

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

func (t *Transport) clock() time.Time {
	if t.now != nil {
		return t.now()
	}
	return time.Now()
}

// wait sleeps d honouring ctx.
func (t *Transport) wait(ctx context.Context, d time.Duration) error {
	if t.sleep != nil {
		return t.sleep(ctx, d)
	}
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitUntil waits until `until` unless that is beyond MaxWait or the
// context's deadline, in which case it returns a *HoldError at once.
func (t *Transport) waitUntil(ctx context.Context, host string, until time.Time, reason string) error {
	now := t.clock()
	d := until.Sub(now)
	if d <= 0 {
		return ctx.Err()
	}
	if t.MaxWait > 0 && d > t.MaxWait {
		return &HoldError{Host: host, Until: until, Reason: reason, Limit: "MaxWait " + t.MaxWait.String()}
	}
	if dl, ok := ctx.Deadline(); ok && dl.Before(until) {
		return &HoldError{Host: host, Until: until, Reason: reason, Limit: "the context's deadline"}
	}
	return t.wait(ctx, d)
}

// heldUntil returns the instant before which nothing may be sent to host.
func (t *Transport) heldUntil(host string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.holds[host]
}

// hold makes host held until `until`, unless it already is for longer.
func (t *Transport) hold(host string, until time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.holds == nil {
		t.holds = make(map[string]time.Time)
	}
	if len(t.holds) >= 1024 { // forget holds that are over
		now := t.clock()
		for h, u := range t.holds {
			if !u.After(now) {
				delete(t.holds, h)
			}
		}
	}
	if until.After(t.holds[host]) {
		t.holds[host] = until
	}
}

// RoundTrip sends req once its host is no longer held (and its budget slot
// has come, with a Budget), learns from the answer, and retries a 429 or
// 503 as the Transport's doc says.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	host := req.URL.Host
	retryable := idempotent(req) && (req.Body == nil || req.Body == http.NoBody || req.GetBody != nil)
	for attempt := 0; ; attempt++ {
		// Wait out the host's hold; another answer may extend it meanwhile.
		for {
			until := t.heldUntil(host)
			if !until.After(t.clock()) {
				break
			}
			if err := t.waitUntil(ctx, host, until, "rate limit of the host"); err != nil {
				closeBody(req)
				return nil, err
			}
		}
		if t.Budget != nil {
			if err := t.Budget.acquire(ctx, t, req); err != nil {
				closeBody(req)
				return nil, err
			}
		}
		out := req
		if attempt > 0 {
			out = req.Clone(ctx)
			if req.GetBody != nil && req.Body != nil && req.Body != http.NoBody {
				b, err := req.GetBody()
				if err != nil {
					return nil, fmt.Errorf("client: retry %s %s: GetBody: %w", req.Method, req.URL, err)
				}
				out.Body = b
			}
		}
		resp, err := t.base().RoundTrip(out)
		if err != nil {
			return nil, err
		}
		now := t.clock()
		until, retryAfter := holdFrom(resp, now)
		if !until.IsZero() {
			t.hold(host, until)
		}
		limited := resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable
		if !limited || retryAfter.IsZero() || !retryable || attempt >= t.MaxRetries {
			return resp, nil
		}
		// Retry only when the wait fits; otherwise the caller gets the answer.
		d := retryAfter.Sub(now)
		if t.MaxWait > 0 && d > t.MaxWait {
			return resp, nil
		}
		if dl, ok := ctx.Deadline(); ok && dl.Before(retryAfter) {
			return resp, nil
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody)) // keep the connection
		resp.Body.Close()
		// The retry waits at the top of the loop: the hold covers it.
		t.hold(host, retryAfter)
	}
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// idempotent reports whether req may be sent twice, as net/http decides it.
func idempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	_, k1 := req.Header["Idempotency-Key"]
	_, k2 := req.Header["X-Idempotency-Key"]
	return k1 || k2
}

// holdFrom reads what resp advertises: until, the instant before which the
// host should get no call (zero: none), and retryAfter, the instant a 429 or
// 503 may be retried (zero: it says nothing, so it is not retried).
//
//   - Retry-After (seconds or an HTTP date), on a 429 or 503 only: both.
//   - RateLimit (the IETF field, `"name";r=0;t=3`, or the older
//     `limit=10, remaining=0, reset=3`): a policy with r=0 holds for its t
//     seconds, or for the w of the RateLimit-Policy of the same name when it
//     has no t.
//   - RateLimit-Remaining: 0 with RateLimit-Reset (seconds).
//   - X-RateLimit-Remaining: 0 with X-RateLimit-Reset: seconds from now, or
//     a Unix time when above 1,000,000,000 (Unix milliseconds above
//     1,000,000,000,000), read against the answer's Date when it has one so
//     that a skewed local clock does not shorten the hold.
//
// A 429 or 503 holds until its reset even without a remaining of 0, and is
// retried at the hold's end when it has no Retry-After. No hold is longer
// than maxHold.
func holdFrom(resp *http.Response, now time.Time) (until, retryAfter time.Time) {
	h := resp.Header
	limited := resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable
	var d time.Duration // the longest hold advertised
	found := false
	take := func(x time.Duration) {
		if x < 0 {
			return
		}
		if x > maxHold {
			x = maxHold
		}
		if !found || x > d {
			d, found = x, true
		}
	}
	if limited {
		if ra, ok := parseRetryAfter(h.Get("Retry-After"), now); ok {
			take(ra)
		}
	}
	for _, v := range h.Values("RateLimit") {
		if x, ok := ietfHold(v, h.Values("RateLimit-Policy")); ok {
			take(x)
		}
	}
	if x, ok := remainingHold(h.Get("RateLimit-Remaining"), h.Get("RateLimit-Reset"), "", now, limited); ok {
		take(x)
	}
	if x, ok := remainingHold(h.Get("X-RateLimit-Remaining"), h.Get("X-RateLimit-Reset"), h.Get("Date"), now, limited); ok {
		take(x)
	}
	if !found {
		return time.Time{}, time.Time{}
	}
	until = now.Add(d)
	if limited {
		retryAfter = until
	}
	return until, retryAfter
}

// seconds parses a non-negative decimal number of seconds.
func seconds(s string) (float64, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return 0, false
	}
	return f, true
}

func secondsDur(f float64) time.Duration {
	if f > maxHold.Seconds() {
		return maxHold
	}
	return time.Duration(f * float64(time.Second))
}

// parseRetryAfter reads Retry-After: delay-seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	if f, ok := seconds(v); ok {
		return secondsDur(f), true
	}
	if at, err := http.ParseTime(strings.TrimSpace(v)); err == nil {
		if d := at.Sub(now); d > 0 {
			return d, true
		}
		return 0, true
	}
	return 0, false
}

// remainingHold: a remaining of 0 (or a 429/503 without a remaining) with a
// reset holds until the reset.
func remainingHold(remaining, reset, date string, now time.Time, limited bool) (time.Duration, bool) {
	r, hasR := seconds(remaining)
	if hasR && r > 0 || !hasR && !limited {
		return 0, false
	}
	f, ok := seconds(reset)
	if !ok {
		return 0, false
	}
	var at time.Time
	switch {
	case f > 1e12: // Unix milliseconds
		at = time.UnixMilli(int64(f))
	case f > 1e9: // Unix seconds
		at = time.Unix(int64(f), int64((f-math.Floor(f))*1e9))
	default:
		return secondsDur(f), true
	}
	ref := now
	if dt, err := http.ParseTime(date); err == nil && date != "" {
		ref = dt // the server's clock: the reset is on it
	}
	if d := at.Sub(ref); d > 0 {
		return min(d, maxHold), true
	}
	return 0, true
}

// ietfHold reads one RateLimit field value: the IETF form, a list of
// `"policy";r=<remaining>;t=<seconds>`, or the older dictionary
// `limit=10, remaining=0, reset=3`. It returns the longest hold of a policy
// with nothing remaining.
func ietfHold(v string, policies []string) (time.Duration, bool) {
	var d time.Duration
	found := false
	take := func(x time.Duration) {
		if !found || x > d {
			d, found = x, true
		}
	}
	members := splitSF(v, ',')
	// The older dictionary form: remaining=0, reset=3.
	dict := map[string]string{}
	for _, m := range members {
		if k, val, ok := strings.Cut(m, "="); ok && !strings.Contains(m, ";") {
			dict[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(val)
		}
	}
	if rem, ok := dict["remaining"]; ok {
		if r, ok := seconds(rem); ok && r == 0 {
			if f, ok := seconds(dict["reset"]); ok {
				take(secondsDur(f))
			}
		}
		return d, found
	}
	for _, m := range members {
		name, params := sfItem(m)
		r, ok := seconds(params["r"])
		if !ok || r > 0 {
			continue
		}
		if f, ok := seconds(params["t"]); ok {
			take(secondsDur(f))
			continue
		}
		for _, pv := range policies { // no t: the policy's window
			for _, pm := range splitSF(pv, ',') {
				pn, pp := sfItem(pm)
				if pn != name {
					continue
				}
				if f, ok := seconds(pp["w"]); ok {
					take(secondsDur(f))
				}
			}
		}
	}
	return d, found
}

// splitSF splits a structured field on sep outside quoted strings.
func splitSF(v string, sep byte) []string {
	var out []string
	start, quoted := 0, false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\' && quoted:
			i++
		case c == '"':
			quoted = !quoted
		case c == sep && !quoted:
			out = append(out, strings.TrimSpace(v[start:i]))
			start = i + 1
		}
	}
	return append(out, strings.TrimSpace(v[start:]))
}

// sfItem reads `item;k=v;k2=v2`: the item (unquoted) and its parameters.
func sfItem(m string) (string, map[string]string) {
	parts := splitSF(m, ';')
	params := make(map[string]string, len(parts)-1)
	for _, p := range parts[1:] {
		k, val, _ := strings.Cut(p, "=")
		params[strings.ToLower(strings.TrimSpace(k))] = strings.Trim(strings.TrimSpace(val), `"`)
	}
	return strings.Trim(parts[0], `"`), params
}
