package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/memory"
)

// sluiceWith starts a real data plane (server, limiter, embedded store) with
// set in force and returns its URL.
func sluiceWith(t testing.TB, set *rules.Set) string {
	t.Helper()
	return sluiceOn(t, set, memory.DefaultConfig())
}

// sluiceOn is sluiceWith over an embedded store configured as cfg.
func sluiceOn(t testing.TB, set *rules.Set, cfg memory.Config) string {
	t.Helper()
	l, _ := limitertest.New(t, set, cfg)
	srv := httptest.NewServer(server.New(l, server.DefaultConfig()))
	t.Cleanup(srv.Close)
	return srv.URL
}

// egressBudget: every host of plan egress gets `rate` calls a second, in a
// leaky bucket with the default burst (two calls at once).
func egressBudget(rate int64) *rules.Set {
	return &rules.Set{Rules: []rules.Rule{{ID: "egress", Match: rules.Match{Plan: "egress"}, By: rules.ByUser,
		Limit: rate, Window: rules.Duration(time.Second), Algorithm: algorithm.LeakyBucket}}}
}

type arrivals struct {
	mu    sync.Mutex
	times []time.Time
}

func (a *arrivals) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.times = append(a.times, time.Now())
	a.mu.Unlock()
	io.WriteString(w, "ok")
}

// startUpstream serves an upstream that records the calls' arrivals until
// the test ends.
func startUpstream(t *testing.T) (*arrivals, *httptest.Server) {
	t.Helper()
	up := &arrivals{}
	upstream := httptest.NewServer(up)
	t.Cleanup(upstream.Close)
	return up, upstream
}

// Many goroutines calling one host through a Budget of 20 a second: the
// upstream never sees more than the budget allows in any second, every call
// is sent (the waits fit MaxWait), and they are spread at the rule's rate.
func TestBudgetPacesCalls(t *testing.T) {
	up, upstream := startUpstream(t)
	tr := client.NewTransport(nil)
	tr.Budget = &client.Budget{Sluice: client.New(sluiceWith(t, egressBudget(20)))}
	c := &http.Client{Transport: tr}

	const workers, each = 6, 5 // 30 calls: 2 at once, then one each 50 ms
	startT := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				resp, err := c.Get(upstream.URL)
				if err != nil {
					t.Errorf("GET: %v", err)
					return
				}
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	up.mu.Lock()
	times := up.times
	up.mu.Unlock()
	if len(times) != workers*each {
		t.Fatalf("upstream saw %d calls, want %d", len(times), workers*each)
	}
	// Any 1-second window holds at most 21 calls of the slots (two at once,
	// then one each 50 ms); a call reaches the upstream late by its own
	// scheduling and round-trip delay, never early, so the spread J of
	// those delays (measured: the k-th slot is (k-1)·50 ms after the
	// first) can bring one more per 50 ms of J into a window.
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	lo, hi := time.Duration(1<<62), time.Duration(-1<<62)
	for k, u := range times {
		d := u.Sub(times[0]) - time.Duration(max(k-1, 0))*50*time.Millisecond
		lo, hi = min(lo, d), max(hi, d)
	}
	jitter := hi - lo
	allow := 21 + int((jitter+50*time.Millisecond-1)/(50*time.Millisecond))
	for i := range times {
		n := 0
		for _, u := range times[i:] {
			if u.Sub(times[i]) < time.Second {
				n++
			}
		}
		if n > allow {
			t.Fatalf("%d calls within 1s from call %d, want at most %d (21, plus the send delay spread %v)", n, i, allow, jitter)
		}
	}
	// Unpaced calls would spread over the whole 1.4 s of slots; 600 ms
	// leaves room for a machine whose cores the rest of the suite takes.
	if jitter > 600*time.Millisecond {
		t.Fatalf("send delays spread over %v: the calls are not paced to their slots", jitter)
	}
	// 28 calls after the first two take 28 × 50 ms.
	if el := time.Since(startT); el < 1400*time.Millisecond {
		t.Errorf("30 calls took %v, want at least 1.4s at 20 a second", el)
	}
}

// A call the budget cannot grant within MaxWait is not sent: the caller
// gets a *BudgetError, the upstream nothing.
func TestBudgetNeverSendsUngranted(t *testing.T) {
	up, upstream := startUpstream(t)
	tr := client.NewTransport(nil)
	tr.MaxWait = 120 * time.Millisecond // 2 at once, then slots at 100 ms: 3 granted
	// The budget's clock stands still, so that the 8 calls are one burst
	// to it however the machine schedules them.
	frozen := time.Now().UnixMicro()
	tr.Budget = &client.Budget{Sluice: client.New(sluiceOn(t, egressBudget(10), memory.Config{Clock: func() int64 { return frozen }, SweepInterval: -1}))}
	c := &http.Client{Transport: tr}
	var mu sync.Mutex
	sent, refused := 0, 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.Get(upstream.URL)
			mu.Lock()
			defer mu.Unlock()
			var be *client.BudgetError
			switch {
			case err == nil:
				resp.Body.Close()
				sent++
			case errors.As(err, &be) && be.Reservation.RetryAfterMS > 0:
				refused++
			default:
				t.Errorf("GET: %v, want a *BudgetError", err)
			}
		}()
	}
	wg.Wait()
	up.mu.Lock()
	got := len(up.times)
	up.mu.Unlock()
	if sent != 3 || refused != 5 || got != sent {
		t.Fatalf("sent %d refused %d, upstream saw %d; want 3 sent, 5 refused, upstream 3", sent, refused, got)
	}
}

// No rule for the host, or no sluice at all: nothing is sent.
func TestBudgetFailsClosed(t *testing.T) {
	up, upstream := startUpstream(t)
	for name, url := range map[string]string{
		"no rule":   sluiceWith(t, &rules.Set{Rules: []rules.Rule{{ID: "other", Match: rules.Match{Plan: "other"}, Limit: 1, Window: rules.Duration(time.Second)}}}),
		"no sluice": "http://127.0.0.1:1",
	} {
		tr := client.NewTransport(nil)
		tr.Budget = &client.Budget{Sluice: client.New(url)}
		if _, err := (&http.Client{Transport: tr}).Get(upstream.URL); err == nil {
			t.Errorf("%s: the call was sent", name)
		}
	}
	if len(up.times) != 0 {
		t.Fatalf("upstream saw %d calls, want 0", len(up.times))
	}
}

// A caller whose context ends while it waits for its slot does not send.
func TestBudgetHonoursContext(t *testing.T) {
	up, upstream := startUpstream(t)
	tr := client.NewTransport(nil)
	tr.Budget = &client.Budget{Sluice: client.New(sluiceWith(t, egressBudget(2)))}
	c := &http.Client{Transport: tr}
	for range 2 { // the burst
		resp, err := c.Get(upstream.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, upstream.URL, nil)
	if _, err := c.Do(req); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	// A deadline before the slot: the reservation asks no further, is
	// refused, and nothing is sent.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	req, _ = http.NewRequestWithContext(ctx2, http.MethodGet, upstream.URL, nil)
	var be *client.BudgetError
	if _, err := c.Do(req); !errors.As(err, &be) {
		t.Fatalf("err %v, want a *BudgetError", err)
	}
	if len(up.times) != 2 {
		t.Fatalf("upstream saw %d calls, want 2", len(up.times))
	}
}

func Example_budget() {
	// A sluice data plane with one egress rule: 10 calls a second per host.
	sluiceURL := sluiceForExample()
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer upstream.Close()

	tr := client.NewTransport(http.DefaultTransport)
	tr.Budget = &client.Budget{Sluice: client.New(sluiceURL)}
	hc := &http.Client{Transport: tr}

	start := time.Now()
	for range 5 {
		resp, err := hc.Get(upstream.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
	}
	// Two at once (the leaky bucket's burst), then one each 100 ms.
	fmt.Println("5 calls sent; paced:", time.Since(start) >= 300*time.Millisecond)
	// Output: 5 calls sent; paced: true
}

func sluiceForExample() string {
	st, _ := memory.New(memory.DefaultConfig())
	ix, _ := rules.Compile(egressBudget(10))
	l := limiter.New(st, limiter.Config{})
	l.SetRules(ix)
	return httptest.NewServer(server.New(l, server.DefaultConfig())).URL
}
