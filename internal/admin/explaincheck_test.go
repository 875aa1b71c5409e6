package admin

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/adminclient"
	dataplane "github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store/memory"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// TestExplainIsTheCheckDecision is the differential test of POST /explain
// for a call of the check API (user, IP, endpoint, cost): on the embedded
// store and on a real Redis, each step is explained twice (the same
// answer), then sent to POST /ratelimit/check, whose allowed, remaining
// and rule are the explained decision's; and a twin data plane nobody
// explained to answers the same (explain took nothing). Rows: replaces,
// shadow, limit 0, unlimited, charges (after_response), cost > 1 and
// past every capacity.
func TestExplainIsTheCheckDecision(t *testing.T) {
	stores := map[string]func(t *testing.T) limiter.Store{
		"memory": func(t *testing.T) limiter.Store { return limitertest.Store(t, memory.DefaultConfig()) },
		"redis": func(t *testing.T) limiter.Store {
			srv := redistest.Start(t)
			st, err := sredis.New(t.Context(), sredis.Config{Addrs: []string{srv.Addr()}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		},
	}
	type step struct {
		endpoint string
		cost     int64
		n        int // times
	}
	steps := []step{
		{"GET /orders", 1, 6},  // orders-new replaces orders: 4, then denied
		{"GET /shadow", 1, 3},  // a shadow rule of 1 never denies
		{"GET /closed", 1, 2},  // limit 0: denied, 0 of 0
		{"GET /open", 1, 2},    // unlimited
		{"POST /tokens", 4, 4}, // charges of 4 against 10: the third goes into debt
		{"POST /tokens", 1, 1},
		{"GET /other", 3, 2},
		{"GET /other", 150, 1}, // beyond per-user's capacity
	}
	for name, newStore := range stores {
		t.Run(name, func(t *testing.T) {
			e0 := newEnv(t, Config{})
			for _, r := range [][2]string{
				{"per-user", `{"limit": 100, "window": "1h"}`},
				{"orders", `{"limit": 2, "window": "1h", "by": "ip", "name": "orders", "match": {"endpoint": "GET /orders"}}`},
				{"orders-new", `{"limit": 4, "window": "1h", "replaces": ["orders"], "match": {"endpoint": "GET /orders"}}`},
				{"shadowed", `{"limit": 1, "window": "1h", "shadow": true, "match": {"endpoint": "GET /shadow"}}`},
				{"closed", `{"limit": 0, "window": "1h", "match": {"endpoint": "GET /closed"}}`},
				{"open", `{"unlimited": true, "match": {"endpoint": "GET /open"}}`},
				{"tokens", `{"limit": 10, "window": "1h", "algorithm": "fixed_window", "charge": "after_response", "match": {"endpoint": "POST /tokens"}}`},
			} {
				e0.must(e0.do("PUT", "/rules/"+r[0], r[1]), 201)
			}
			data := func() (*limiter.Limiter, *httptest.Server) {
				lim := limiter.New(newStore(t), limiter.Config{})
				lim.SetRules(e0.src.Current())
				e0.src.Subscribe(lim.SetRules)
				hs := httptest.NewServer(dataplane.New(lim, dataplane.Config{}))
				t.Cleanup(hs.Close)
				return lim, hs
			}
			lim, plane := data()
			_, twin := data()
			e := &env{t: t, h: New(e0.src, Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				Console: &Console{Limiter: lim}}), hdr: http.Header{}}
			type decision struct {
				Allowed   bool   `json:"allowed"`
				Remaining int64  `json:"remaining"`
				Rule      string `json:"rule"`
			}
			check := func(hs *httptest.Server, body string) decision {
				t.Helper()
				resp, err := http.Post(hs.URL+"/ratelimit/check", "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var d decision
				if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
					t.Fatal(err)
				}
				return d
			}
			i := 0
			for _, s := range steps {
				for range s.n {
					m, p, _ := strings.Cut(s.endpoint, " ")
					var ds [2]decision
					for k := range ds {
						r := e.must(e.do("POST", "/explain", fmt.Sprintf(`{"user": "alice", "ip": "203.0.113.7", "method": %q, "path": %q, "cost": %d}`, m, p, s.cost)), 200)
						var ex adminclient.Explanation
						if err := json.Unmarshal(r.body, &ex); err != nil {
							t.Fatal(err)
						}
						ds[k] = decision{ex.Check.Decision.Allowed, ex.Check.Decision.Remaining, ex.Check.Decision.Rule}
					}
					if ds[0] != ds[1] {
						t.Errorf("step %d %s: explained %+v, then %+v", i, s.endpoint, ds[0], ds[1])
					}
					body := fmt.Sprintf(`{"user": "alice", "ip": "203.0.113.7", "endpoint": %q, "cost": %d}`, s.endpoint, s.cost)
					real := check(plane, body)
					if real != ds[0] {
						t.Errorf("step %d %s cost %d: explained %+v, /ratelimit/check %+v", i, s.endpoint, s.cost, ds[0], real)
					}
					if tw := check(twin, body); tw != real {
						t.Errorf("step %d %s: %+v after explain, %+v without", i, s.endpoint, real, tw)
					}
					i++
				}
			}
		})
	}
}
