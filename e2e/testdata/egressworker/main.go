// Command egressworker is one worker process of e2e's TestEgressSharedBudget:
// -goroutines goroutines call -upstream through client.Transport with a
// sluice Budget (plan "egress", per host) for -duration, then print a JSON
// summary: calls sent, refused by the budget, failed otherwise, and the
// instant each call left for the upstream (Unix µs, read just before the
// wrapped transport sends it).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/client"
)

func main() {
	sluice := flag.String("sluice", "", "data plane URL")
	upstream := flag.String("upstream", "", "URL to call")
	goroutines := flag.Int("goroutines", 20, "concurrent callers")
	duration := flag.Duration("duration", 20*time.Second, "how long to start calls")
	maxWait := flag.Duration("max-wait", 2*time.Second, "Transport.MaxWait")
	flag.Parse()

	rec := &recorder{base: &http.Transport{MaxIdleConnsPerHost: *goroutines}}
	tr := client.NewTransport(rec)
	tr.MaxWait = *maxWait
	tr.Budget = &client.Budget{Sluice: client.New(*sluice, client.WithHTTPClient(&http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: *goroutines}}))}
	hc := &http.Client{Transport: tr}

	var sent, refused, failed atomic.Int64
	var firstErr atomic.Value
	deadline := time.Now().Add(*duration)
	var wg sync.WaitGroup
	for range *goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				resp, err := hc.Get(*upstream)
				var be *client.BudgetError
				switch {
				case err == nil:
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					sent.Add(1)
				case errors.As(err, &be):
					refused.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				default:
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	wg.Wait()
	rec.mu.Lock()
	out := map[string]any{"sent": sent.Load(), "refused": refused.Load(), "failed": failed.Load(), "sends_us": rec.sends}
	rec.mu.Unlock()
	if e := firstErr.Load(); e != nil {
		out["first_error"] = e
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// recorder notes when each call is handed to base.
type recorder struct {
	base  http.RoundTripper
	mu    sync.Mutex
	sends []int64
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	now := time.Now().UnixMicro()
	r.mu.Lock()
	r.sends = append(r.sends, now)
	r.mu.Unlock()
	return r.base.RoundTrip(req)
}
