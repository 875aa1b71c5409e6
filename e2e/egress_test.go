package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// TestEgressSharedBudget is the shared egress budget end to end: 3 worker processes
// × 20 goroutines share a budget of 50 calls a second (a leaky_bucket: two
// at once, then one each 20 ms) through 2 sluice instances on one Redis,
// calling a counting upstream for 20 s. In every 1-second window after the
// first the upstream sees at most 51 calls, plus one per 20 ms of the
// measured spread of the calls' delays from their slots (the machine's
// scheduling, see below); at least 95 % of the budget is used; no call is
// refused, since every wait fits the 2 s maximum.
func TestEgressSharedBudget(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	rulesYAML := `rules:
  - {id: partner, match: {plan: egress}, by: user, limit: 50, window: 1s, algorithm: leaky_bucket}
`
	var ins []*instance
	for i := range 2 {
		path := filepath.Join(dir, "rules-"+string(rune('a'+i))+".yaml")
		if err := os.WriteFile(path, []byte(rulesYAML), 0o644); err != nil {
			t.Fatal(err)
		}
		// A generous store deadline: a reservation is never served locally,
		// so on a busy machine a 5 ms deadline would refuse calls.
		ins = append(ins, serve(t, path, "--redis", srv.Addr(), "--store-timeout", "1s"))
	}

	var mu sync.Mutex
	var arrivals []time.Time
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
	}))
	defer up.Close()

	worker := filepath.Join(dir, "egressworker")
	if out, err := exec.Command("go", "build", "-o", worker, "./testdata/egressworker").CombinedOutput(); err != nil {
		t.Fatalf("building the worker: %v\n%s", err, out)
	}
	const duration = 20 * time.Second
	type summary struct {
		Sent, Refused, Failed int64
		FirstError            string  `json:"first_error"`
		SendsUS               []int64 `json:"sends_us"`
	}
	sums := make([]summary, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(worker, "-sluice", ins[i%2].data, "-upstream", up.URL,
				"-goroutines", "20", "-duration", duration.String(), "-max-wait", "2s")
			var out, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &stderr
			if err := cmd.Run(); err != nil {
				t.Errorf("worker %d: %v: %s", i, err, stderr.String())
				return
			}
			if err := json.Unmarshal(out.Bytes(), &sums[i]); err != nil {
				t.Errorf("worker %d: %q: %v", i, out.String(), err)
			}
		}()
	}
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	var sent int64
	for i, s := range sums {
		if s.Refused != 0 || s.Failed != 0 {
			t.Errorf("worker %d: %d refused, %d failed (first: %s); want none: every wait fits max_wait_ms", i, s.Refused, s.Failed, s.FirstError)
		}
		sent += s.Sent
	}
	if int64(len(arrivals)) != sent {
		t.Fatalf("the upstream saw %d calls, the workers sent %d", len(arrivals), sent)
	}
	if len(arrivals) == 0 {
		t.Fatal("the upstream saw no call")
	}
	slices.SortFunc(arrivals, func(a, b time.Time) int { return a.Compare(b) })
	first, last := arrivals[0], arrivals[len(arrivals)-1]
	worst, worstAt := busiest(arrivals)
	var sends []time.Time
	for _, s := range sums {
		for _, us := range s.SendsUS {
			sends = append(sends, time.UnixMicro(us))
		}
	}
	slices.SortFunc(sends, func(a, b time.Time) int { return a.Compare(b) })
	worstSent, _ := busiest(sends)
	run := last.Sub(first)
	budget := 50 * run.Seconds()
	// The slots sluice hands out are exact: the queue never empties, so the
	// k-th call's slot is s0 + (k-1)·20 ms (the first two at s0). The
	// transport sleeps until its slot (send_at_us: one machine, one clock),
	// so a call leaves late only by the time its worker takes to wake and
	// send, and reaches the upstream later by the time the upstream takes
	// to read it. The spread J of those delays, measured here, is what can
	// bring more than 51 calls into one second at the upstream: one more
	// per 20 ms of J. On an idle machine J is a few ms; on one whose cores
	// other processes take it is tens of ms or more, and the workers' own
	// send times (logged) show the same bunching as the upstream: no
	// sender can keep slots closer than its process is scheduled.
	jitter := spread(arrivals)
	allow := 51 + int((jitter+20*time.Millisecond-1)/(20*time.Millisecond))
	t.Logf("upstream: %d calls in %v (%.1f%% of a budget of %.0f); busiest 1 s window after the first second: %d calls, at +%v (as the workers sent them: %d); delay spread at the upstream %v (as sent: %v); load average %s",
		len(arrivals), run.Round(time.Millisecond), 100*float64(len(arrivals))/budget, budget, worst, worstAt.Round(time.Millisecond), worstSent,
		jitter.Round(time.Millisecond), spread(sends).Round(time.Millisecond), loadAverage())
	if worst > allow {
		t.Errorf("%d calls within 1 s (at +%v), want at most 51, plus %d for the measured send delay spread of %v", worst, worstAt, allow-51, jitter)
	}
	if jitter > 400*time.Millisecond {
		t.Errorf("send delays spread over %v: the calls are not paced to their slots", jitter)
	}
	// Over the run, never more than the budget: two at once, then one each
	// 20 ms of the slots' span, which is the arrivals' span give or take J.
	if most := 2 + int((run+jitter)/(20*time.Millisecond)); len(arrivals) > most {
		t.Errorf("%d calls in %v, want at most %d (the budget over the run)", len(arrivals), run, most)
	}
	if float64(len(arrivals)) < 0.95*budget {
		t.Errorf("%d calls in %v: %.1f%% of the budget, want at least 95%%", len(arrivals), run, 100*float64(len(arrivals))/budget)
	}
	if run < duration-time.Second {
		t.Errorf("the calls spanned %v, want about %v", run, duration)
	}
}

// busiest returns the most calls of sorted times in one 1-second window
// [a, a+1s) that starts at a call at least a second after the first, and
// where that window starts, from the first call.
func busiest(times []time.Time) (int, time.Duration) {
	worst, at := 0, time.Duration(0)
	j := 0
	for i, a := range times {
		if a.Sub(times[0]) < time.Second {
			continue // the first second: the burst of an idle budget
		}
		j = max(j, i)
		for j < len(times) && times[j].Sub(a) < time.Second {
			j++
		}
		if j-i > worst {
			worst, at = j-i, a.Sub(times[0])
		}
	}
	return worst, at
}

// spread is the spread of the calls' delays from their slots, when the
// k-th slot is (k-1)·20 ms after the first (0-based; the first two at
// once): the queue never empties.
func spread(times []time.Time) time.Duration {
	lo, hi := time.Duration(1<<62), time.Duration(-1<<62)
	for k, a := range times {
		d := a.Sub(times[0]) - time.Duration(max(k-1, 0))*20*time.Millisecond
		lo, hi = min(lo, d), max(hi, d)
	}
	return hi - lo
}

// loadAverage is the machine's 1-minute load average, for the log.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "unknown"
	}
	return f[0]
}
