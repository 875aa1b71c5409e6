package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/clocktest"
)

// counting is an upstream that records the arrival time of every call and
// answers call number `at` (1-based) with the headers limit returns, and
// every other call 200.
type counting struct {
	mu     sync.Mutex
	now    func() time.Time
	at     int
	limit  func(h http.Header, now time.Time) int
	times  []time.Time
	limitT time.Time // when the limiting answer was sent
}

func (u *counting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	u.mu.Lock()
	now := u.now()
	u.times = append(u.times, now)
	n := len(u.times)
	u.mu.Unlock()
	w.Header().Set("Date", now.UTC().Format(http.TimeFormat))
	if n == u.at {
		status := u.limit(w.Header(), now)
		u.mu.Lock()
		u.limitT = now
		u.mu.Unlock()
		w.WriteHeader(status)
		return
	}
	io.WriteString(w, "ok")
}

func (u *counting) arrivals() ([]time.Time, time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]time.Time(nil), u.times...), u.limitT
}

func get(t *testing.T, c *http.Client, url string) int {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// start is a whole second, so that Unix-second resets are exact.
var start = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func TestTransportHoldsHostAfterLimit(t *testing.T) {
	cases := []struct {
		name  string
		limit func(h http.Header, now time.Time) int
		hold  time.Duration // nothing may arrive within this after the limiting answer
	}{
		{"retry-after", func(h http.Header, _ time.Time) int {
			h.Set("Retry-After", "2")
			return http.StatusTooManyRequests
		}, 2 * time.Second},
		{"retry-after on 503", func(h http.Header, _ time.Time) int {
			h.Set("Retry-After", "2")
			return http.StatusServiceUnavailable
		}, 2 * time.Second},
		{"retry-after http date", func(h http.Header, now time.Time) int {
			h.Set("Retry-After", now.Add(4*time.Second).UTC().Format(http.TimeFormat))
			return http.StatusTooManyRequests
		}, 4 * time.Second},
		{"ietf ratelimit", func(h http.Header, _ time.Time) int {
			h.Set("RateLimit-Policy", `"x";q=10;w=60`)
			h.Set("RateLimit", `"x";r=0;t=3`)
			return http.StatusTooManyRequests
		}, 3 * time.Second},
		{"ietf ratelimit, 200, remaining 0", func(h http.Header, _ time.Time) int {
			h.Set("RateLimit", `"x";r=0;t=3`)
			return http.StatusOK
		}, 3 * time.Second},
		{"ietf ratelimit without t: the policy's window", func(h http.Header, _ time.Time) int {
			h.Set("RateLimit-Policy", `"burst";q=100;w=1, "day";q=1000;w=5`)
			h.Set("RateLimit", `"burst";r=40, "day";r=0`)
			return http.StatusOK
		}, 5 * time.Second},
		{"ietf ratelimit, two policies, the longest", func(h http.Header, _ time.Time) int {
			h.Set("RateLimit", `"a";r=0;t=1, "b";r=0;t=4, "c";r=3;t=60`)
			return http.StatusTooManyRequests
		}, 4 * time.Second},
		{"older ratelimit dictionary", func(h http.Header, _ time.Time) int {
			h.Set("RateLimit", `limit=10, remaining=0, reset=3`)
			return http.StatusOK
		}, 3 * time.Second},
		{"ratelimit-remaining and -reset", func(h http.Header, _ time.Time) int {
			h.Set("RateLimit-Remaining", "0")
			h.Set("RateLimit-Reset", "2")
			return http.StatusOK
		}, 2 * time.Second},
		{"x-ratelimit-reset unix time", func(h http.Header, now time.Time) int {
			h.Set("X-RateLimit-Limit", "10")
			h.Set("X-RateLimit-Remaining", "0")
			h.Set("X-RateLimit-Reset", strconv.FormatInt(now.Add(3*time.Second).Unix(), 10))
			return http.StatusTooManyRequests
		}, 3 * time.Second},
		{"x-ratelimit-reset unix time on a 200", func(h http.Header, now time.Time) int {
			h.Set("X-RateLimit-Remaining", "0")
			h.Set("X-RateLimit-Reset", strconv.FormatInt(now.Add(5*time.Second).Unix(), 10))
			return http.StatusOK
		}, 5 * time.Second},
		{"x-ratelimit-reset unix milliseconds", func(h http.Header, now time.Time) int {
			h.Set("X-RateLimit-Remaining", "0")
			h.Set("X-RateLimit-Reset", strconv.FormatInt(now.Add(2500*time.Millisecond).UnixMilli(), 10))
			return http.StatusTooManyRequests
		}, 2500 * time.Millisecond},
		{"x-ratelimit-reset seconds", func(h http.Header, _ time.Time) int {
			h.Set("X-RateLimit-Remaining", "0")
			h.Set("X-RateLimit-Reset", "3")
			return http.StatusTooManyRequests
		}, 3 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktest.New(start)
			up := &counting{now: clk.Now, at: 10, limit: tc.limit}
			srv := httptest.NewServer(up)
			defer srv.Close()
			tr := NewTransport(nil)
			tr.now, tr.sleep = clk.Now, clk.Sleep
			c := &http.Client{Transport: tr}
			for i := 0; i < 15; i++ {
				if got := get(t, c, srv.URL); got != http.StatusOK && got != http.StatusTooManyRequests {
					t.Fatalf("call %d: status %d", i, got)
				}
			}
			times, limitT := up.arrivals()
			if limitT.IsZero() {
				t.Fatal("the upstream never limited")
			}
			var next time.Time
			for _, at := range times {
				if at.After(limitT) || (at.Equal(limitT) && !next.IsZero()) {
					if d := at.Sub(limitT); d > 0 && d < tc.hold {
						t.Fatalf("a call arrived %v after the limiting answer, want none before %v", d, tc.hold)
					}
					if next.IsZero() && at.After(limitT) {
						next = at
					}
				}
			}
			if next.IsZero() {
				t.Fatalf("no call after the limiting answer; arrivals %v", times)
			}
			if d := next.Sub(limitT); d != tc.hold {
				t.Errorf("the next call arrived %v after the limiting answer, want exactly %v (the hold, no longer)", d, tc.hold)
			}
			if len(times) < 15 {
				t.Errorf("upstream saw %d calls, want at least 15", len(times))
			}
		})
	}
}

// The retry of a 429: an idempotent call is sent again after Retry-After and
// the caller sees the 200; a POST without an idempotency key sees the 429.
func TestTransportRetries(t *testing.T) {
	limit := func(h http.Header, _ time.Time) int {
		h.Set("Retry-After", "2")
		return http.StatusTooManyRequests
	}
	cases := []struct {
		name       string
		method     string
		body       io.Reader
		header     string
		maxRetries int
		want       int
		calls      int
	}{
		{"GET is retried", http.MethodGet, nil, "", 2, http.StatusOK, 2},
		{"PUT with a replayable body is retried", http.MethodPut, strings.NewReader("x"), "", 2, http.StatusOK, 2},
		{"POST is not retried", http.MethodPost, strings.NewReader("x"), "", 2, http.StatusTooManyRequests, 1},
		{"POST with Idempotency-Key is retried", http.MethodPost, strings.NewReader("x"), "Idempotency-Key", 2, http.StatusOK, 2},
		{"PUT with a body that cannot be replayed is not retried", http.MethodPut, io.MultiReader(strings.NewReader("x")), "", 2, http.StatusTooManyRequests, 1},
		{"MaxRetries 0 is not retried", http.MethodGet, nil, "", 0, http.StatusTooManyRequests, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktest.New(start)
			up := &counting{now: clk.Now, at: 1, limit: limit}
			srv := httptest.NewServer(up)
			defer srv.Close()
			tr := NewTransport(nil)
			tr.now, tr.sleep = clk.Now, clk.Sleep
			tr.MaxRetries = tc.maxRetries
			req, err := http.NewRequest(tc.method, srv.URL, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			if tc.header != "" {
				req.Header.Set(tc.header, "k1")
			}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("RoundTrip: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.want)
			}
			times, _ := up.arrivals()
			if len(times) != tc.calls {
				t.Fatalf("upstream saw %d calls, want %d", len(times), tc.calls)
			}
			if tc.calls == 2 && times[1].Sub(times[0]) != 2*time.Second {
				t.Errorf("retry %v after the 429, want 2s", times[1].Sub(times[0]))
			}
		})
	}
}

// Retries are bounded: an upstream that always answers 429 sees
// 1 + MaxRetries calls, and the caller gets the last 429.
func TestTransportRetriesBounded(t *testing.T) {
	clk := clocktest.New(start)
	var calls int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	tr := NewTransport(nil)
	tr.now, tr.sleep = clk.Now, clk.Sleep
	tr.MaxRetries = 3
	if got := get(t, &http.Client{Transport: tr}, srv.URL); got != http.StatusTooManyRequests {
		t.Errorf("status %d, want 429", got)
	}
	if calls != 4 {
		t.Errorf("upstream saw %d calls, want 4 (1 + MaxRetries 3)", calls)
	}
}

// A hold beyond MaxWait, or beyond the context's deadline, fails the call at
// once with a *HoldError, without sending it; a context cancelled during
// the wait ends it with the context's error.
func TestTransportHoldLimits(t *testing.T) {
	clk := clocktest.New(start)
	up := &counting{now: clk.Now, at: 1, limit: func(h http.Header, _ time.Time) int {
		h.Set("Retry-After", "120")
		return http.StatusTooManyRequests
	}}
	srv := httptest.NewServer(up)
	defer srv.Close()
	tr := NewTransport(nil)
	tr.now, tr.sleep = clk.Now, clk.Sleep
	c := &http.Client{Transport: tr}
	if got := get(t, c, srv.URL); got != http.StatusTooManyRequests {
		t.Fatalf("status %d, want the 429 (its 120 s exceed MaxWait, so no retry)", got)
	}
	_, err := c.Get(srv.URL)
	var he *HoldError
	if !errors.As(err, &he) || he.Limit != "MaxWait 1m0s" || !he.Until.Equal(start.Add(120*time.Second)) {
		t.Fatalf("second call: err %v, want a *HoldError until +120s beyond MaxWait", err)
	}
	tr.MaxWait = 0 // no cap: the context's deadline decides
	tr.now = time.Now
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	tr.hold(req.URL.Host, time.Now().Add(2*time.Second))
	if _, err := tr.RoundTrip(req); !errors.As(err, &he) || he.Limit != "the context's deadline" {
		t.Fatalf("err %v, want a *HoldError beyond the context's deadline", err)
	}
	if times, _ := up.arrivals(); len(times) != 1 {
		t.Errorf("upstream saw %d calls, want 1: held calls are never sent", len(times))
	}
}

// Real time, concurrent callers: after a 429 with Retry-After: 2, ten
// goroutines calling the host at once all arrive 2 s later or more, and a
// caller whose context is cancelled during the hold gets context.Canceled
// without its call being sent.
func TestTransportHoldRealTime(t *testing.T) {
	up := &counting{now: time.Now, at: 1, limit: func(h http.Header, _ time.Time) int {
		h.Set("Retry-After", "2")
		return http.StatusTooManyRequests
	}}
	srv := httptest.NewServer(up)
	defer srv.Close()
	tr := NewTransport(nil)
	tr.MaxRetries = 0
	c := &http.Client{Transport: tr}
	if got := get(t, c, srv.URL); got != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		if _, err := c.Do(req); !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled caller: err %v, want context.Canceled", err)
		}
	}()
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := get(t, c, srv.URL); got != http.StatusOK {
				t.Errorf("status %d, want 200", got)
			}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	cancel()
	wg.Wait()
	times, limitT := up.arrivals()
	if len(times) != 11 {
		t.Errorf("upstream saw %d calls, want 11 (the cancelled one never sent)", len(times))
	}
	for _, at := range times[1:] {
		if d := at.Sub(limitT); d < 2*time.Second {
			t.Errorf("a call arrived %v after the 429, want 2s or more", d)
		}
	}
}

func TestHoldFromIgnoresNonsense(t *testing.T) {
	for _, hv := range [][2]string{
		{"Retry-After", "-1"}, {"Retry-After", "NaN"}, {"Retry-After", "soon"},
		{"RateLimit", `"x";r=5;t=3`}, {"RateLimit", `"x";r=0;t=-3`}, {"RateLimit", `garbage;;;==`},
		{"X-RateLimit-Reset", "3"}, // no remaining on a 200: not a hold
	} {
		resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}}
		resp.Header.Set(hv[0], hv[1])
		if until, _ := holdFrom(resp, start); !until.IsZero() {
			t.Errorf("%s: %s on a 200 holds until %v, want no hold", hv[0], hv[1], until)
		}
	}
	resp := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{}}
	resp.Header.Set("Retry-After", "1e300")
	if until, _ := holdFrom(resp, start); !until.Equal(start.Add(maxHold)) {
		t.Errorf("Retry-After 1e300 holds until %v, want the cap %v", until, start.Add(maxHold))
	}
}
