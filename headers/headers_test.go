package headers

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
)

func compiled(id string, limit int64, window time.Duration, kind algorithm.Kind, burst int64) *rules.Compiled {
	r := rules.Rule{ID: id, Limit: limit, Window: rules.Duration(window), Algorithm: kind, Burst: burst}
	return &rules.Compiled{
		Rule:          r,
		Params:        r.Params(),
		WindowSeconds: int64(window / time.Second),
	}
}

func TestCanonicalNames(t *testing.T) {
	for _, name := range []string{Limit, Remaining, Reset, Policy, RateLimit, retryAfter} {
		if got := http.CanonicalHeaderKey(name); got != name {
			t.Errorf("CanonicalHeaderKey(%q) = %q, want %q", name, got, name)
		}
	}
	for spec, name := range map[string]string{
		"X-RateLimit-Limit": Limit, "X-RateLimit-Remaining": Remaining, "X-RateLimit-Reset": Reset,
		"RateLimit-Policy": Policy, "RateLimit": RateLimit,
	} {
		if got := http.CanonicalHeaderKey(spec); got != name {
			t.Errorf("CanonicalHeaderKey(%q) = %q, want %q", spec, got, name)
		}
	}
}

func TestSet(t *testing.T) {
	free := compiled("free-per-user", 100, time.Minute, algorithm.TokenBucket, 0)
	now := time.Unix(1716800000, 0)
	tests := []struct {
		name string
		d    limiter.Decision
		want http.Header // nil: no headers at all
	}{
		{
			name: "allowed",
			d:    limiter.Decision{Allowed: true, Limit: 100, Remaining: 99, ResetAfter: 600 * time.Millisecond, Now: now, Rule: free},
			want: http.Header{
				Limit: {"100"}, Remaining: {"99"}, Reset: {"1716800001"},
				Policy: {`"free-per-user";q=100;w=60`}, RateLimit: {`"free-per-user";r=99;t=1`},
			},
		},
		{
			name: "denied",
			d: limiter.Decision{Reason: algorithm.ReasonLimited, Limit: 100, ResetAfter: 60 * time.Second,
				RetryAfter: 600 * time.Millisecond, Now: now, Rule: free},
			want: http.Header{
				Limit: {"100"}, Remaining: {"0"}, Reset: {"1716800060"},
				Policy: {`"free-per-user";q=100;w=60`}, RateLimit: {`"free-per-user";r=0;t=60`},
				retryAfter: {"1"},
			},
		},
		{
			name: "denied, fractional seconds round up",
			d: limiter.Decision{Reason: algorithm.ReasonLimited, Limit: 100, ResetAfter: 2400 * time.Millisecond,
				RetryAfter: 2400 * time.Millisecond, Now: now.Add(700 * time.Millisecond), Rule: free},
			want: http.Header{
				Limit: {"100"}, Remaining: {"0"}, Reset: {"1716800004"}, // ceil(…00.7 + 2.4) = …04
				Policy: {`"free-per-user";q=100;w=60`}, RateLimit: {`"free-per-user";r=0;t=3`},
				retryAfter: {"3"},
			},
		},
		{
			name: "denied, whole seconds stay",
			d: limiter.Decision{Reason: algorithm.ReasonLimited, Limit: 100, ResetAfter: 3 * time.Second,
				RetryAfter: 3 * time.Second, Now: now, Rule: free},
			want: http.Header{
				Limit: {"100"}, Remaining: {"0"}, Reset: {"1716800003"},
				Policy: {`"free-per-user";q=100;w=60`}, RateLimit: {`"free-per-user";r=0;t=3`},
				retryAfter: {"3"},
			},
		},
		{
			name: "denied, a microsecond to wait is a whole second",
			d: limiter.Decision{Reason: algorithm.ReasonLimited, Limit: 100, ResetAfter: time.Microsecond,
				RetryAfter: time.Microsecond, Now: now, Rule: free},
			want: http.Header{
				Limit: {"100"}, Remaining: {"0"}, Reset: {"1716800001"},
				Policy: {`"free-per-user";q=100;w=60`}, RateLimit: {`"free-per-user";r=0;t=1`},
				retryAfter: {"1"},
			},
		},
		{
			name: "denied with no wait still says 1",
			d:    limiter.Decision{Reason: algorithm.ReasonLimited, Limit: 100, Now: now, Rule: free},
			want: http.Header{
				Limit: {"100"}, Remaining: {"0"}, Reset: {"1716800000"},
				Policy: {`"free-per-user";q=100;w=60`}, RateLimit: {`"free-per-user";r=0;t=0`},
				retryAfter: {"1"},
			},
		},
		{
			name: "cost exceeds capacity: no Retry-After",
			d:    limiter.Decision{Reason: algorithm.ReasonCostExceedsCapacity, Limit: 100, Remaining: 100, Now: now, Rule: free},
			want: http.Header{
				Limit: {"100"}, Remaining: {"100"}, Reset: {"1716800000"},
				Policy: {`"free-per-user";q=100;w=60`}, RateLimit: {`"free-per-user";r=100;t=0`},
			},
		},
		{
			name: "reset 0",
			d:    limiter.Decision{Allowed: true, Limit: 100, Remaining: 100, Now: now.Add(time.Nanosecond), Rule: free},
			want: http.Header{
				Limit: {"100"}, Remaining: {"100"}, Reset: {"1716800001"},
				Policy: {`"free-per-user";q=100;w=60`}, RateLimit: {`"free-per-user";r=100;t=0`},
			},
		},
		{
			name: "negative remaining reads 0",
			d:    limiter.Decision{Allowed: true, Limit: 5, Remaining: -1, Now: now, Rule: free},
			want: http.Header{
				Limit: {"5"}, Remaining: {"0"}, Reset: {"1716800000"},
				Policy: {`"free-per-user";q=100;w=60`}, RateLimit: {`"free-per-user";r=0;t=0`},
			},
		},
		{
			name: "no rule",
			d:    limiter.Decision{Allowed: true, Now: now},
		},
		{
			name: "no rule, denied",
			d:    limiter.Decision{Reason: algorithm.ReasonLimited, RetryAfter: time.Second, Now: now},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			Set(h, &tt.d)
			want := tt.want
			if want == nil {
				want = http.Header{}
			}
			if !reflect.DeepEqual(h, want) {
				t.Errorf("Set(%+v) = %v, want %v", tt.d, h, want)
			}
		})
	}
}

func TestSetReplaces(t *testing.T) {
	h := http.Header{Limit: {"1", "2"}, "Other": {"x"}}
	d := limiter.Decision{Allowed: true, Limit: 7, Remaining: 6, Now: time.Unix(10, 0), Rule: compiled("r", 7, time.Second, algorithm.FixedWindow, 0)}
	Set(h, &d)
	if got := h.Values("X-RateLimit-Limit"); !reflect.DeepEqual(got, []string{"7"}) {
		t.Errorf("X-RateLimit-Limit = %q, want [7]", got)
	}
	if got := h.Get("Other"); got != "x" {
		t.Errorf("Other = %q, want x", got)
	}
	// A later Add must not write into the values of another header.
	h.Add("X-RateLimit-Limit", "8")
	if got := h.Values("X-RateLimit-Remaining"); !reflect.DeepEqual(got, []string{"6"}) {
		t.Errorf("after Add, X-RateLimit-Remaining = %q, want [6]", got)
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	tests := []struct {
		d    limiter.Decision
		want int64
	}{
		{limiter.Decision{Allowed: true, RetryAfter: time.Second}, 0},
		{limiter.Decision{Reason: algorithm.ReasonCostExceedsCapacity}, 0},
		{limiter.Decision{Reason: algorithm.ReasonLimited}, 1},
		{limiter.Decision{Reason: algorithm.ReasonLimited, RetryAfter: time.Nanosecond}, 1},
		{limiter.Decision{Reason: algorithm.ReasonLimited, RetryAfter: time.Second}, 1},
		{limiter.Decision{Reason: algorithm.ReasonLimited, RetryAfter: time.Second + time.Microsecond}, 2},
		{limiter.Decision{Reason: algorithm.ReasonLimited, RetryAfter: 2400 * time.Millisecond}, 3},
		{limiter.Decision{Reason: algorithm.ReasonLimited, RetryAfter: 24 * time.Hour}, 86400},
	}
	for _, tt := range tests {
		if got := RetryAfterSeconds(&tt.d); got != tt.want {
			t.Errorf("RetryAfterSeconds(allowed=%v reason=%v retry=%v) = %d, want %d", tt.d.Allowed, tt.d.Reason, tt.d.RetryAfter, got, tt.want)
		}
	}
}

func TestWriteDenied(t *testing.T) {
	free := compiled("free-per-user", 100, time.Minute, algorithm.TokenBucket, 0)
	now := time.Unix(1716800000, 0)
	tests := []struct {
		name       string
		d          limiter.Decision
		wantBody   string
		wantRetry  string
		wantPolicy string
	}{
		{
			name:       "rate limited",
			d:          limiter.Decision{Reason: algorithm.ReasonLimited, Limit: 100, ResetAfter: 3 * time.Second, RetryAfter: 2400 * time.Millisecond, Now: now, Rule: free},
			wantBody:   `{"error":"rate_limit_exceeded","retry_after":3}`,
			wantRetry:  "3",
			wantPolicy: `"free-per-user";q=100;w=60`,
		},
		{
			name:       "cost exceeds capacity",
			d:          limiter.Decision{Reason: algorithm.ReasonCostExceedsCapacity, Limit: 100, Remaining: 100, Now: now, Rule: free},
			wantBody:   `{"error":"rate_limit_exceeded","reason":"cost_exceeds_capacity","message":"the call costs more than rule \"free-per-user\" can ever admit at once (capacity 100); it will never pass"}`,
			wantPolicy: `"free-per-user";q=100;w=60`,
		},
		{
			name:      "no rule",
			d:         limiter.Decision{Reason: algorithm.ReasonLimited, RetryAfter: 1500 * time.Millisecond, Now: now},
			wantBody:  `{"error":"rate_limit_exceeded","retry_after":2}`,
			wantRetry: "2",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			WriteDenied(w, &tt.d)
			if w.Code != http.StatusTooManyRequests {
				t.Errorf("status = %d, want 429", w.Code)
			}
			if got := w.Body.String(); got != tt.wantBody {
				t.Errorf("body = %s, want %s", got, tt.wantBody)
			}
			h := w.Result().Header
			if got := h.Get("Content-Type"); got != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", got)
			}
			if got, ok := h["Retry-After"]; ok != (tt.wantRetry != "") || ok && got[0] != tt.wantRetry {
				t.Errorf("Retry-After = %q (present %v), want %q", got, ok, tt.wantRetry)
			}
			if got := h.Get("RateLimit-Policy"); got != tt.wantPolicy {
				t.Errorf("RateLimit-Policy = %q, want %q", got, tt.wantPolicy)
			}
		})
	}
}

func TestSetAllocs(t *testing.T) {
	d := limiter.Decision{Reason: algorithm.ReasonLimited, Limit: 100, ResetAfter: 3 * time.Second, RetryAfter: time.Second,
		Now: time.Unix(1716800000, 0), Rule: compiled("free-per-user", 100, time.Minute, algorithm.TokenBucket, 0)}
	h := http.Header{}
	Set(h, &d) // the map has its entries
	if n := testing.AllocsPerRun(100, func() { Set(h, &d) }); n > 2 {
		t.Errorf("Set allocates %v times, want ≤ 2", n)
	}
}

func BenchmarkSet(b *testing.B) {
	d := limiter.Decision{Reason: algorithm.ReasonLimited, Limit: 100, ResetAfter: 3 * time.Second, RetryAfter: time.Second,
		Now: time.Unix(1716800000, 0), Rule: compiled("free-per-user", 100, time.Minute, algorithm.TokenBucket, 0)}
	h := http.Header{}
	b.ReportAllocs()
	for b.Loop() {
		Set(h, &d)
	}
}
