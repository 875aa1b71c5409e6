package rls_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/memory"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// stores returns the stores an Envoy API test runs on: the embedded store
// and a Redis store over a redis-server of the test's own.
func stores(t *testing.T) map[string]func(t *testing.T) limiter.Store {
	return map[string]func(t *testing.T) limiter.Store{
		"memory": func(t *testing.T) limiter.Store { return limitertest.Store(t, memory.DefaultConfig()) },
		"redis": func(t *testing.T) limiter.Store {
			srv := redistest.Start(t)
			cfg := sredis.DefaultConfig()
			cfg.Addrs = []string{srv.Addr()}
			st, err := sredis.New(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		},
	}
}

// TestUnregisteredAPIKeyIsNoCaller: an api_key entry the client registry
// does not hold is not an identity, as the gateway ignores an X-API-Key
// nobody registered. A client that sends a new key each call is the same
// caller as without one — its address — and a by: client rule of 2 an
// hour lets 2 of 8 calls through, not 8 of 8. A registered key keeps its
// own bucket.
func TestUnregisteredAPIKeyIsNoCaller(t *testing.T) {
	set := &rules.Set{
		Rules: []rules.Rule{{ID: "per-client", Limit: 2, Window: rules.Duration(time.Hour), By: rules.ByClient}},
		Clients: map[string]rules.Client{
			"api_key:k_live_42": {Plan: "free"},
		},
	}
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnvStore(t, set, name, newStore(t), nil)
			allowed := 0
			for i := range 8 {
				resp := e.call(t, request("edge", desc("remote_address", "203.0.113.7", "api_key", "fresh-"+strconv.Itoa(i),
					"method", "GET", "path", "/api/orders")))
				if resp.OverallCode == ok {
					allowed++
				}
			}
			if allowed != 2 {
				t.Errorf("calls with a new unregistered api_key each: %d of 8 allowed, want 2 (the address's bucket)", allowed)
			}
			// The address's bucket is the one they spent: a call without a key is denied.
			if resp := e.call(t, request("edge", desc("remote_address", "203.0.113.7"))); resp.OverallCode != over {
				t.Errorf("call from the same address without a key = %v, want OVER_LIMIT", resp.OverallCode)
			}
			// A registered key is a caller of its own.
			for i := range 3 {
				resp := e.call(t, request("edge", desc("remote_address", "203.0.113.7", "api_key", "k_live_42")))
				if want := map[bool]any{true: ok, false: over}[i < 2]; resp.OverallCode != want {
					t.Errorf("call %d with the registered key = %v, want %v", i+1, resp.OverallCode, want)
				}
			}
		})
	}
}
