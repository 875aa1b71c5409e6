package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// TestSharedLimitAccuracy: three `sluice serve` processes on one Redis, 200
// concurrent workers spread over them, one client, a rule of limit 1000 per
// 24h → exactly 1000 calls allowed, for every exact algorithm; then the same
// on a 3-master Redis Cluster.
func TestSharedLimitAccuracy(t *testing.T) {
	standaloneAndCluster(t, accuracy)
}

// standaloneAndCluster runs fn as the subtest "standalone" on one Redis,
// then as "cluster" on a 3-master Redis Cluster; redisAddrs is what
// --redis takes.
func standaloneAndCluster(t *testing.T, fn func(t *testing.T, redisAddrs string)) {
	t.Run("standalone", func(t *testing.T) {
		srv := redistest.Start(t)
		fn(t, srv.Addr())
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t, 3, 0)
		fn(t, strings.Join(c.Addrs(), ","))
	})
}

// clearOfMidnight waits until just past UTC midnight when it is less than
// two minutes away: a fixed window of a day is aligned to it.
func clearOfMidnight() {
	if d := time.Until(time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)); d < 2*time.Minute {
		time.Sleep(d + time.Second)
	}
}

func accuracy(t *testing.T, redisAddrs string) {
	clearOfMidnight() // the rules' fixed window is a day
	dir := t.TempDir()
	rulesYAML := `rules:
  - {id: tb, match: {endpoint: "GET /tb"}, limit: 1000, window: 24h, algorithm: token_bucket}
  - {id: lb, match: {endpoint: "GET /lb"}, limit: 1000, window: 24h, burst: 999, algorithm: leaky_bucket}
  - {id: fw, match: {endpoint: "GET /fw"}, limit: 1000, window: 24h, algorithm: fixed_window}
  - {id: sl, match: {endpoint: "GET /sl"}, limit: 1000, window: 24h, algorithm: sliding_log}
`
	var ins []*instance
	for i := 0; i < 3; i++ {
		path := filepath.Join(dir, fmt.Sprintf("rules-%d.yaml", i))
		if err := os.WriteFile(path, []byte(rulesYAML), 0o644); err != nil {
			t.Fatal(err)
		}
		// A generous store deadline: on a machine busy with the rest of the
		// suite a 5 ms deadline could send a call to the local fallback,
		// and this test is about the shared store's exactness.
		ins = append(ins, serve(t, path, "--redis", redisAddrs, "--store-timeout", "1s"))
	}
	client := fmt.Sprintf("accuracy-%d", time.Now().UnixNano())
	for _, ep := range []string{"tb", "lb", "fw", "sl"} {
		t.Run(ep, func(t *testing.T) {
			const workers, perWorker = 200, 8 // 1600 calls for a limit of 1000
			var allowed, denied, failed atomic.Int64
			var wg sync.WaitGroup
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					in := ins[w%len(ins)]
					for i := 0; i < perWorker; i++ {
						var a checkAnswer
						resp := do(t, "POST", in.data+"/ratelimit/check",
							map[string]any{"user": client, "endpoint": "GET /" + ep}, &a)
						switch {
						case resp.StatusCode != 200:
							failed.Add(1)
						case a.Allowed:
							allowed.Add(1)
						default:
							denied.Add(1)
						}
					}
				}(w)
			}
			wg.Wait()
			if allowed.Load() != 1000 || failed.Load() != 0 {
				t.Fatalf("%s: allowed %d, denied %d, failed %d; want exactly 1000 allowed", ep, allowed.Load(), denied.Load(), failed.Load())
			}
			t.Logf("%s: %d workers over %d instances: allowed %d, denied %d", ep, workers, len(ins), allowed.Load(), denied.Load())
		})
	}
}
