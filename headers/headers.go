// Package headers turns a limiter.Decision into the quota headers every
// decision carries and into the 429 answer of a denied call (docs/api.md,
// "Quota headers"):
//
//	X-RateLimit-Limit: 100
//	X-RateLimit-Remaining: 0
//	X-RateLimit-Reset: 1716800060
//	RateLimit-Policy: "free-per-user";q=100;w=60
//	RateLimit: "free-per-user";r=0;t=3
//	Retry-After: 3                       (denied calls only)
//
// Every time is rounded up: a client that waits what the headers say is
// never early. The functions are safe for concurrent use and cost two
// allocations per decision.
package headers

import (
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/jsonhttp"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
)

// The quota headers' names in their http.CanonicalHeaderKey form, so that
// entries can be set on an http.Header directly without canonicalizing on
// every call.
const (
	Limit     = "X-Ratelimit-Limit"     // X-RateLimit-Limit
	Remaining = "X-Ratelimit-Remaining" // X-RateLimit-Remaining
	Reset     = "X-Ratelimit-Reset"     // X-RateLimit-Reset
	Policy    = "Ratelimit-Policy"      // RateLimit-Policy
	RateLimit = "Ratelimit"             // RateLimit
)

// retryAfter is Retry-After's name, as http.CanonicalHeaderKey spells it.
const retryAfter = "Retry-After"

// Set writes the quota headers of d on h, replacing any values they had:
// X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset (Unix seconds
// when the quota is whole again, rounded up), RateLimit-Policy and RateLimit
// (remaining, and seconds until the reset rounded up); and, when d denies a
// call that could pass later, Retry-After (see RetryAfterSeconds). A call
// whose cost exceeds what the rule can ever hold gets no Retry-After: waiting
// does not help it. Set writes nothing when no rule matched (d.Rule == nil).
func Set(h http.Header, d *limiter.Decision) {
	if d.Rule == nil {
		return
	}
	remaining := max(d.Remaining, 0)
	resetAfter := max(d.ResetAfter, 0)

	// All values go into one buffer that becomes one string; each header
	// value is a substring of it.
	var a [256]byte
	var end [6]int
	b := strconv.AppendInt(a[:0], d.Limit, 10)
	end[0] = len(b)
	b = strconv.AppendInt(b, remaining, 10)
	end[1] = len(b)
	b = strconv.AppendInt(b, resetUnix(d.Now, resetAfter), 10)
	end[2] = len(b)
	b = append(b, '"')
	b = append(b, d.Rule.ID...) // [a-z0-9._-]: nothing to escape
	b = append(b, `";r=`...)
	b = append(b, b[end[0]:end[1]]...) // remaining, formatted above
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, ceilDiv(int64(resetAfter), int64(time.Second)), 10)
	end[3] = len(b)
	n := 4
	if retry := RetryAfterSeconds(d); retry > 0 {
		b = strconv.AppendInt(b, retry, 10)
		end[4] = len(b)
		n = 5
	}
	b = appendPolicy(b, d.Rule)
	end[n] = len(b)
	s := string(b)
	vals := make([]string, n+1)
	start := 0
	for i := range n + 1 {
		vals[i] = s[start:end[i]]
		start = end[i]
	}
	h[Limit] = vals[0:1:1]
	h[Remaining] = vals[1:2:2]
	h[Reset] = vals[2:3:3]
	h[RateLimit] = vals[3:4:4]
	if n == 5 {
		h[retryAfter] = vals[4:5:5]
	}
	h[Policy] = vals[n : n+1 : n+1]
}

// appendPolicy appends r's RateLimit-Policy item, `"<id>";q=<limit>;w=<window
// in seconds>`, to b.
func appendPolicy(b []byte, r *rules.Compiled) []byte {
	b = append(b, '"')
	b = append(b, r.ID...) // [a-z0-9._-] or an id of sluice's own: nothing to escape
	b = append(b, `";q=`...)
	b = strconv.AppendInt(b, r.Limit, 10)
	b = append(b, ";w="...)
	return strconv.AppendInt(b, r.WindowSeconds, 10)
}

// RetryAfterSeconds is the Retry-After of d: the whole seconds until the
// call could pass, rounded up and at least 1. It is 0 when d allows the call
// and when the call can never pass (algorithm.ReasonCostExceedsCapacity).
func RetryAfterSeconds(d *limiter.Decision) int64 {
	if d.Allowed || d.Reason == algorithm.ReasonCostExceedsCapacity {
		return 0
	}
	return max(ceilDiv(int64(d.RetryAfter), int64(time.Second)), 1)
}

// WriteDenied answers a denied call: status 429 with the headers of Set,
// Content-Type: application/json and the body
//
//	{"error":"rate_limit_exceeded","retry_after":3}
//
// or, for a call whose cost exceeds what the rule can ever hold (no
// Retry-After, since waiting does not help),
//
//	{"error":"rate_limit_exceeded","reason":"cost_exceeds_capacity","message":"..."}
func WriteDenied(w http.ResponseWriter, d *limiter.Decision) {
	h := w.Header()
	Set(h, d)
	jsonhttp.SetContentType(h)
	var a [256]byte
	b := append(a[:0], `{"error":"rate_limit_exceeded",`...)
	if d.Reason == algorithm.ReasonCostExceedsCapacity {
		b = append(b, `"reason":"cost_exceeds_capacity","message":"the call costs more than `...)
		if d.Rule != nil {
			b = append(b, `rule \"`...)
			b = append(b, d.Rule.ID...)
			b = append(b, `\" can ever admit at once (capacity `...)
			b = strconv.AppendInt(b, d.Rule.Params.Capacity(), 10)
			b = append(b, `); it will never pass"}`...)
		} else {
			b = append(b, `its rate limit can ever admit at once; it will never pass"}`...)
		}
	} else {
		retry := RetryAfterSeconds(d)
		if d.Rule == nil { // Set wrote nothing; a 429 still says when to retry
			h[retryAfter] = []string{strconv.FormatInt(retry, 10)}
		}
		b = append(b, `"retry_after":`...)
		b = strconv.AppendInt(b, retry, 10)
		b = append(b, '}')
	}
	w.WriteHeader(http.StatusTooManyRequests)
	w.Write(b) //nolint:errcheck // the client is gone; nothing to do
}

// resetUnix returns the Unix second at or after now+after.
func resetUnix(now time.Time, after time.Duration) int64 {
	ns := int64(now.Nanosecond()) + int64(after)
	return now.Unix() + ceilDiv(ns, int64(time.Second))
}

// ceilDiv returns ⌈a/b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b > 0 {
		q++
	}
	return q
}
