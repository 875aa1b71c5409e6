package middleware

import (
	"errors"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/headers"
	"github.com/sluicehq/sluice/limiter"
)

// WithShaping makes the middleware shape traffic instead of only rejecting
// it, for egress: each call reserves a slot of its rules' budget
// (limiter.Reserve) and is held until the slot (the store's decision time +
// the wait, see slot), then passed to next; a call
// whose slot is more than maxWait away is answered 429 at once, as a
// denied call is, and takes nothing. A burst is passed on at the rules'
// rate, in the order the calls reserved.
//
// Every rule a call matches must be a token_bucket or leaky_bucket (others
// cannot reserve): a call matching another is undecided (the error
// handler). A call no rule matches goes to next at once. A caller that goes
// away while held is not passed on; its slot stays taken. maxWait is capped
// at limiter.MaxWait; 0 (the default) keeps the middleware rejecting at
// once, as ingress wants.
func WithShaping(maxWait time.Duration) Option {
	return func(o *options) { o.shape = min(max(maxWait, 0), limiter.MaxWait) }
}

// serveShaped is serve in shaping mode.
func (f *filter) serveShaped(w http.ResponseWriter, r *http.Request, next http.Handler, req *limiter.Request) {
	sent := time.Now()
	d, wait, err := f.l.Reserve(r.Context(), req, f.o.shape)
	if errors.Is(err, limiter.ErrNoBudget) {
		next.ServeHTTP(w, r)
		return
	}
	if f.o.observe != nil && err == nil {
		f.o.observe(d, *req)
	}
	if f.refused(w, r, &d, err) {
		return
	}
	if hold := time.Until(slot(d.Now, wait, sent, time.Now())); hold > 0 {
		t := time.NewTimer(hold)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return // the caller is gone: nothing to answer
		}
	}
	headers.Set(w.Header(), &d)
	next.ServeHTTP(w, r)
}

// slot is the instant to pass a call on: its slot, at (the store's clock at
// the decision) + wait, not wait after the answer arrived, which would add
// the time the answer took to come back. The store decided between sent and
// recv, so on a clock that agrees with this one the slot lies within
// [sent + wait, recv + wait]; a store's clock that is off by more is
// trusted only that far, which never holds a call longer than wait after
// the answer nor less than wait after the reservation left.
func slot(at time.Time, wait time.Duration, sent, recv time.Time) time.Time {
	lo, hi, s := sent.Add(wait), recv.Add(wait), at.Add(wait)
	if s.Before(lo) {
		return lo
	}
	if s.After(hi) {
		return hi
	}
	return s
}
