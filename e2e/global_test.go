package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// An envoyproxy/ratelimit configuration, written for this test: a shared
// budget on a fixed descriptor, and a per-value limit on a key without a
// value.
const envoyBudget = `domain: api
descriptors:
  - key: generic_key
    value: search
    rate_limit:
      unit: day
      requests_per_unit: 1000
  - key: tenant
    rate_limit:
      unit: day
      requests_per_unit: 2
`

// TestGlobalBudgetEnvoy: envoyproxy/ratelimit's configuration, converted by
// `sluice rules import`, served by three `sluice serve` processes on one
// Redis; 200 callers with 200 identities send (generic_key, search) with
// their own (user, …) descriptor through the Envoy API, 1,600 requests for
// a budget of 1,000 a day: exactly 1,000 are OK. Then the same on a
// 3-master Redis Cluster.
func TestGlobalBudgetEnvoy(t *testing.T) {
	standaloneAndCluster(t, globalBudgetEnvoy)
}

func globalBudgetEnvoy(t *testing.T, redisAddrs string) {
	clearOfMidnight() // the budget's fixed window is a day
	dir := t.TempDir()
	rulesYAML := importEnvoy(t, dir, "api.yaml", envoyBudget)
	var clients []rlsv3.RateLimitServiceClient
	var ins []*instance
	for i := range 3 {
		in, c := serveEnvoy(t, dir, strconv.Itoa(i), rulesYAML, "--redis", redisAddrs, "--store-timeout", "1s")
		ins = append(ins, in)
		clients = append(clients, c)
	}
	run := fmt.Sprint(time.Now().UnixNano())
	ask := func(c rlsv3.RateLimitServiceClient, ds ...*ratelimitv3.RateLimitDescriptor) (*rlsv3.RateLimitResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "api", Descriptors: ds})
	}

	// Per value: two a day for each tenant, whichever instance answers.
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp, err := ask(clients[i], descriptor("tenant", "acme-"+run))
		if err != nil {
			t.Fatal(err)
		}
		if st := resp.Statuses[0]; st.Code != want || st.CurrentLimit.GetRequestsPerUnit() != 2 || st.LimitRemaining != uint32(max(1-i, 0)) {
			t.Fatalf("tenant call %d: %v, want %v with 2 a day, %d left", i, st, want, max(1-i, 0))
		}
	}

	// Shared: (generic_key, search) is one budget, whoever calls (each
	// subtest starts its own Redis, so the budget is whole).
	const workers, perWorker, budget = 200, 8, 1000
	var allowed, denied atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			c := clients[w%len(clients)]
			for range perWorker {
				resp, err := ask(c, descriptor("generic_key", "search"), descriptor("user", fmt.Sprintf("caller-%03d", w)))
				if err != nil {
					errs <- err
					return
				}
				if resp.OverallCode == rlsv3.RateLimitResponse_OK {
					allowed.Add(1)
				} else {
					denied.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	if allowed.Load() != budget || denied.Load() != workers*perWorker-budget {
		t.Errorf("%d OK, %d OVER_LIMIT of %d requests on a budget of %d; want exactly %d OK", allowed.Load(), denied.Load(), workers*perWorker, budget, budget)
		// Where the decisions came from: a decision of the local fallback
		// (the breaker open, or a call past the store's wait) is not the
		// shared budget's.
		for i, in := range ins {
			t.Logf("instance %d: %s", i, in.decisionSources(t))
		}
	}
}

// decisionSources returns in's decisions by source and outcome, its breaker
// openings and its store errors, from /metrics.
func (in *instance) decisionSources(t testing.TB) string {
	t.Helper()
	var out []string
	for line := range strings.Lines(in.metrics(t)) {
		for _, m := range []string{"sluice_decisions_total{", "sluice_store_breaker_openings_total ", "sluice_store_errors_total{"} {
			if strings.HasPrefix(line, m) && !strings.HasSuffix(strings.TrimSpace(line), " 0") {
				out = append(out, strings.TrimSpace(line))
			}
		}
	}
	return strings.Join(out, "; ")
}
