package loadgen

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// sleeping is a loadgen Sleep for a synctest bubble: the bubble's clock
// passes d at once. With the calls of taking, the clock moves only when the
// code under test sleeps or a call takes time, and with one worker a run is
// deterministic.
func sleeping(_ context.Context, d time.Duration) bool {
	time.Sleep(d)
	return true
}

// taking returns a Call that takes d of the bubble's time and allows every
// other call.
func taking(d time.Duration) func(int) Call {
	return func(int) Call {
		n := 0
		return func(context.Context) (bool, error) {
			time.Sleep(d)
			n++
			return n%2 == 1, nil
		}
	}
}

func TestRunSchedule(t *testing.T) {
	tests := []struct {
		name     string
		rate     float64
		requests int64
		callTime time.Duration
		// want
		calls, late, missed int64
		minLat, maxLat      time.Duration
	}{
		{name: "closed loop", callTime: 10 * time.Millisecond,
			calls: 100, minLat: 10 * time.Millisecond, maxLat: 10 * time.Millisecond},
		{name: "closed loop, request cap", requests: 30, callTime: 10 * time.Millisecond,
			calls: 30, minLat: 10 * time.Millisecond, maxLat: 10 * time.Millisecond},
		{name: "fixed rate, server keeps up", rate: 100, callTime: 2 * time.Millisecond,
			calls: 100, minLat: 2 * time.Millisecond, maxLat: 2 * time.Millisecond},
		{name: "fixed rate, request cap", rate: 100, requests: 10, callTime: 2 * time.Millisecond,
			calls: 10, minLat: 2 * time.Millisecond, maxLat: 2 * time.Millisecond},
		{
			// Each call takes 25 ms but one is due every 10 ms: call k is
			// sent at 25k ms, 15k ms late, and its latency counts from when
			// it was due: 25 + 15k ms. Calls are sent until 100 ms past
			// the end (call 43 at 1075 ms); the rest are missed.
			name: "fixed rate, server too slow", rate: 100, callTime: 25 * time.Millisecond,
			calls: 44, late: 43, missed: 56, minLat: 25 * time.Millisecond, maxLat: (25 + 15*43) * time.Millisecond,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				res, err := Run(context.Background(), Config{
					Concurrency: 1,
					Duration:    time.Second,
					Rate:        tt.rate,
					Requests:    tt.requests,
					NewCall:     taking(tt.callTime),
					Sleep:       sleeping,
				})
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				if res.Requests != tt.calls || res.Late != tt.late || res.Missed != tt.missed {
					t.Errorf("Run = %d calls, %d late, %d missed; want %d, %d, %d",
						res.Requests, res.Late, res.Missed, tt.calls, tt.late, tt.missed)
				}
				if got, want := res.Allowed+res.Denied, tt.calls; got != want || res.Errors != 0 {
					t.Errorf("allowed %d + denied %d = %d with %d errors, want %d with 0", res.Allowed, res.Denied, got, res.Errors, want)
				}
				if got, want := res.Latency.Count(), uint64(tt.calls); got != want {
					t.Errorf("Latency.Count() = %d, want %d", got, want)
				}
				if res.Latency.Min() != tt.minLat || res.Latency.Max() != tt.maxLat {
					t.Errorf("latency in [%v, %v], want [%v, %v]", res.Latency.Min(), res.Latency.Max(), tt.minLat, tt.maxLat)
				}
			})
		})
	}
}

// TestRunFixedRateWorkers runs the fixed-rate schedule with several workers
// and the real clock. Timing on a shared machine varies, so it checks only
// what does not: every call due is made or reported missed, exactly once.
func TestRunFixedRateWorkers(t *testing.T) {
	var calls atomic.Int64
	res, err := Run(context.Background(), Config{
		Concurrency: 8, Duration: 100 * time.Millisecond, Rate: 2000,
		NewCall: func(int) Call {
			return func(context.Context) (bool, error) { calls.Add(1); return true, nil }
		},
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.Requests+res.Missed != 200 || res.Requests != calls.Load() || res.Allowed != res.Requests {
		t.Errorf("Run = %d calls (%d made), %d missed, %d allowed; want calls + missed = 200, all made calls allowed",
			res.Requests, calls.Load(), res.Missed, res.Allowed)
	}
}

func TestSlots(t *testing.T) {
	tests := []struct {
		rate float64
		dur  time.Duration
		want int64
	}{
		{100, time.Second, 100},
		{3, time.Second, 3},
		{3, 1001 * time.Millisecond, 4},
		{0.5, 10 * time.Second, 5},
		{10000, 10 * time.Second, 100000},
		{7, 100 * time.Millisecond, 1},
	}
	for _, tt := range tests {
		c := Config{Rate: tt.rate, Duration: tt.dur}
		if got := c.slots(); got != tt.want {
			t.Errorf("slots(rate %v, %v) = %d, want %d", tt.rate, tt.dur, got, tt.want)
		}
	}
}

func TestRunErrorsAndCancel(t *testing.T) {
	t.Run("errors are counted, first kept", func(t *testing.T) {
		var n atomic.Int64
		res, err := Run(context.Background(), Config{
			Concurrency: 4, Duration: time.Minute, Requests: 50,
			NewCall: func(int) Call {
				return func(context.Context) (bool, error) {
					if n.Add(1)%5 == 0 {
						return false, errors.New("boom")
					}
					return true, nil
				}
			},
		})
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if res.Requests != 50 || res.Errors != 10 || res.Allowed != 40 {
			t.Errorf("Run = %d calls, %d errors, %d allowed; want 50, 10, 40", res.Requests, res.Errors, res.Allowed)
		}
		if res.FirstErr == nil || res.FirstErr.Error() != "boom" {
			t.Errorf("FirstErr = %v, want boom", res.FirstErr)
		}
	})
	t.Run("cancel stops the run and aborted calls are not errors", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var started atomic.Int64
		done := make(chan *Result)
		go func() {
			res, _ := Run(ctx, Config{
				Concurrency: 3, Duration: time.Hour, Rate: 1, // calls 1 and 2 are due in 1 s and 2 s
				NewCall: func(int) Call {
					return func(ctx context.Context) (bool, error) {
						if started.Add(1) == 1 {
							cancel()
						}
						<-ctx.Done()
						return false, ctx.Err()
					}
				},
			})
			done <- res
		}()
		select {
		case res := <-done:
			if res.Requests != 0 || res.Errors != 0 {
				t.Errorf("Run after cancel = %d calls, %d errors; want 0, 0", res.Requests, res.Errors)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after cancel")
		}
	})
}

func TestConfigValidate(t *testing.T) {
	nc := func(int) Call { return nil }
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"ok", Config{Concurrency: 1, Duration: time.Second, NewCall: nc}, ""},
		{"concurrency", Config{Duration: time.Second, NewCall: nc}, "concurrency"},
		{"duration", Config{Concurrency: 1, NewCall: nc}, "duration"},
		{"rate", Config{Concurrency: 1, Duration: time.Second, Rate: -1, NewCall: nc}, "rate"},
		{"requests", Config{Concurrency: 1, Duration: time.Second, Requests: -1, NewCall: nc}, "requests"},
		{"call", Config{Concurrency: 1, Duration: time.Second}, "NewCall"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if (err == nil) != (tt.want == "") || err != nil && !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want an error about %q", err, tt.want)
			}
		})
	}
}

func TestCheckBodies(t *testing.T) {
	tests := []struct {
		mode string
		n    int
		want []string
	}{
		{"user", 2, []string{`{"user":"u0","endpoint":"GET /api/orders"}`, `{"user":"u1","endpoint":"GET /api/orders"}`}},
		{"ip", 258, []string{`{"ip":"10.0.0.0","endpoint":"GET /api/orders"}`, `{"ip":"10.0.0.1","endpoint":"GET /api/orders"}`}},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			b, err := CheckBodies(tt.n, tt.mode, "GET /api/orders")
			if err != nil {
				t.Fatalf("CheckBodies: %v", err)
			}
			if len(b) != tt.n {
				t.Fatalf("len = %d, want %d", len(b), tt.n)
			}
			for i, w := range tt.want {
				if string(b[i]) != w {
					t.Errorf("body %d = %s, want %s", i, b[i], w)
				}
			}
		})
	}
	b, _ := CheckBodies(258, "ip", "x")
	if got, want := string(b[257]), `{"ip":"10.0.1.1","endpoint":"x"}`; got != want {
		t.Errorf("body 257 = %s, want %s", got, want)
	}
	if _, err := CheckBodies(1, "email", "x"); err == nil {
		t.Error("CheckBodies(mode email) = nil error, want one")
	}
	if _, err := CheckBodies(0, "user", "x"); err == nil {
		t.Error("CheckBodies(0) = nil error, want one")
	}
}

func TestHTTPCheck(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch {
		case r.Method != http.MethodPost || r.URL.Path != "/ratelimit/check" || r.Header.Get("Content-Type") != "application/json":
			http.Error(w, "bad request line", http.StatusBadRequest)
		case strings.Contains(string(body), `"u13"`):
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, `{"error":"internal","message":"boom"}`)
		case calls.Add(1)%2 == 0:
			io.WriteString(w, `{"allowed":false,"limit":1}`)
		default:
			io.WriteString(w, `{"allowed": true, "limit":1}`) // spaced: decoded the slow way
		}
	}))
	defer srv.Close()

	bodies, _ := CheckBodies(10, "user", "GET /api/orders")
	h, err := NewHTTPCheck(srv.URL+"/", 4, 5*time.Second, bodies, Auth{})
	if err != nil {
		t.Fatalf("NewHTTPCheck: %v", err)
	}
	defer h.Close()
	res, err := Run(context.Background(), Config{Concurrency: 4, Duration: time.Minute, Requests: 200, NewCall: h.NewCall})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.Requests != 200 || res.Errors != 0 || res.Allowed != 100 || res.Denied != 100 {
		t.Errorf("Run = %d calls, %d errors, %d allowed, %d denied; want 200, 0, 100, 100 (first error %v)",
			res.Requests, res.Errors, res.Allowed, res.Denied, res.FirstErr)
	}

	bad, _ := CheckBodies(14, "user", "GET /api/orders")
	h2, _ := NewHTTPCheck(srv.URL, 1, 5*time.Second, bad[13:], Auth{})
	defer h2.Close()
	_, err = h2.NewCall(0)(context.Background())
	if err == nil || !strings.Contains(err.Error(), "500") || !strings.Contains(err.Error(), "boom") {
		t.Errorf("call answered 500 = %v, want an error with the status and message", err)
	}
	if _, err := NewHTTPCheck("127.0.0.1:8080", 1, time.Second, bodies, Auth{}); err == nil {
		t.Error("NewHTTPCheck(no scheme) = nil error, want one")
	}
}
