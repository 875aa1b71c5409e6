package gateway_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/gateway"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/middleware"
	"github.com/sluicehq/sluice/rules"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// Shaping mode: a burst of 200 calls reaches a counting upstream as a
// smooth 50 a second (two at once, then one each 20 ms) for the 2 s of
// the maximum wait; the calls beyond it get 429 at once, and never reach
// the upstream.
//
// The limiter runs on real time, as in production, so the burst is as
// sudden as the machine makes it: the connections are opened first, and
// the calls are released together. What the upstream sees is the slots
// plus the scheduling delay of each held call; the bounds below allow for
// the spread of that delay, measured, not assumed.
func TestShapingSmoothsABurst(t *testing.T) {
	l := newLimiter(t, `
rules:
  - id: fragile
    by: ip
    match: {endpoint: "GET /api"}
    limit: 50
    window: 1s
    algorithm: leaky_bucket
`)
	var mu sync.Mutex
	var arrivals []time.Time
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api" {
			mu.Lock()
			arrivals = append(arrivals, time.Now())
			mu.Unlock()
		}
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	g := buildGateway(t, l, up.URL, func(c *gateway.Config) {
		c.Middleware = []middleware.Option{middleware.WithShaping(2 * time.Second)}
	})
	var gmu sync.Mutex
	var received []time.Time         // when each /api call reached the gateway
	var slowestLimited time.Duration // the longest the gateway took to answer a 429
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api" {
			g.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		gmu.Lock()
		received = append(received, start)
		gmu.Unlock()
		rec := &statusRecorder{ResponseWriter: w}
		g.ServeHTTP(rec, r)
		if rec.status == http.StatusTooManyRequests {
			gmu.Lock()
			slowestLimited = max(slowestLimited, time.Since(start))
			gmu.Unlock()
		}
	}))
	defer front.Close()

	const n = 200
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: n}}
	// Open the connections: /warm matches no rule and passes at once.
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, err := hc.Get(front.URL + "/warm"); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()

	type answer struct {
		status int
	}
	answers := make([]answer, n)
	release := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-release
			resp, err := hc.Get(front.URL + "/api")
			if err != nil {
				t.Errorf("GET: %v", err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			answers[i] = answer{resp.StatusCode}
		}()
	}
	close(release)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	ok, limited := 0, 0
	for _, a := range answers {
		switch a.status {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			limited++
		default:
			t.Fatalf("status %d", a.status)
		}
	}
	slices.SortFunc(received, func(a, b time.Time) int { return a.Compare(b) })
	spread := received[len(received)-1].Sub(received[0])
	// Two at once, then a slot each 20 ms within the 2 s wait, counted from
	// each call's reservation: 102 when all arrive at once, more as they
	// spread (the rate itself is checked on the upstream's side below).
	if ok < 102 || ok+limited != n || len(arrivals) != ok {
		t.Fatalf("%d passed, %d got 429, upstream saw %d (arrival spread %v); want at least 102 passed, the rest 429, the upstream exactly the passed",
			ok, limited, len(arrivals), spread)
	}
	if limited == 0 {
		t.Fatal("no call got 429: the burst did not exceed the maximum wait")
	}
	slices.SortFunc(arrivals, func(a, b time.Time) int { return a.Compare(b) })
	// Smooth: in any 1 s, at most the rule's 50 + its burst of 2, plus one
	// per 20 ms of spread in the held calls' scheduling delay (upstream
	// arrival minus slot), bounded here by the whole run's arrival spread
	// and the time it took.
	var jitter time.Duration
	for i := 2; i < len(arrivals); i++ {
		// the slot of the i-th is at least 20 ms after the (i-2)-th's
		if d := 20*time.Millisecond - arrivals[i].Sub(arrivals[i-2]); d > jitter {
			jitter = d
		}
	}
	for i := range arrivals {
		in := 0
		for _, u := range arrivals[i:] {
			if u.Sub(arrivals[i]) < time.Second {
				in++
			}
		}
		if allow := 52 + int((jitter+spread)/(20*time.Millisecond)) + 1; in > allow {
			t.Fatalf("%d calls within 1s of call %d, want at most %d (jitter %v, spread %v)", in, i, allow, jitter, spread)
		}
	}
	if jitter > 200*time.Millisecond {
		t.Fatalf("two held calls reached the upstream %v closer than their slots: not paced", jitter)
	}
	// At once: no 429 was held (measured in the gateway, from the call's
	// arrival to its answer); a held call waits up to the 2 s maximum.
	if slowestLimited >= time.Second {
		t.Fatalf("a 429 took %v to come, want it at once (well under the 2s a held call may wait)", slowestLimited)
	}
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// A held call is passed on at its slot, the instant the store reserved
// (its decision time + wait), not wait after the store's answer arrived:
// the time the answer took to come back is not added to the slot. The
// store is a real redis-server behind a proxy that delays every reply by
// 500 ms (its clock is this machine's).
func TestShapingHoldsUntilTheSlot(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	st, err := sredis.New(context.Background(), sredis.Config{Addrs: []string{proxy.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	set, err := rules.ParseYAML([]byte(`
rules:
  - id: fragile
    by: ip
    match: {endpoint: "GET /api"}
    limit: 1
    window: 2s
    algorithm: leaky_bucket
`))
	if err != nil {
		t.Fatal(err)
	}
	ix, err := rules.Compile(set)
	if err != nil {
		t.Fatal(err)
	}
	l := limiter.New(st, limiter.Config{})
	l.SetRules(ix)

	var mu sync.Mutex
	var arrived time.Time
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived = time.Now()
		mu.Unlock()
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	g := buildGateway(t, l, up.URL, func(c *gateway.Config) {
		c.Middleware = []middleware.Option{middleware.WithShaping(5 * time.Second)}
	})
	front := httptest.NewServer(g)
	defer front.Close()

	const delay = 500 * time.Millisecond
	proxy.SetReplyDelay(delay)
	// Fill the bucket (one call each 2 s, one extra at once) at the
	// store's instant T: the next call's slot is T + 2 s.
	d, wait, err := l.Reserve(context.Background(), &limiter.Request{IP: "127.0.0.1", Method: "GET", Path: "/api", Cost: 2}, 0)
	if err != nil || !d.Allowed || wait != 0 {
		t.Fatalf("filling the bucket: %+v, wait %v, %v", d, wait, err)
	}
	slot := d.Now.Add(2 * time.Second)
	resp, err := http.Get(front.URL + "/api")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200", resp.StatusCode)
	}
	mu.Lock()
	late := arrived.Sub(slot)
	mu.Unlock()
	// The answer came 500 ms after the store reserved: held for the wait
	// from then, the call would reach the upstream 500 ms late.
	if late < 0 || late >= delay/2 {
		t.Fatalf("the upstream saw the call %v after its slot, want within [0, %v): held past the slot by the store's answer delay", late, delay/2)
	}
}
