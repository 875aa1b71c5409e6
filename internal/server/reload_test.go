package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/memory"
)

// reloadEnv is the data plane on a loopback HTTP listener, over a real
// limiter and memory store on a clock that does not move, with the limiter
// at hand to put new rules in force as the rules store does.
type reloadEnv struct {
	lim *limiter.Limiter
	url string
}

func newReloadEnv(t *testing.T, set *rules.Set) *reloadEnv {
	t.Helper()
	clk := newClock()
	lim, _ := limitertest.New(t, set, memory.Config{Clock: clk.Micros, SweepInterval: -1})
	e := &reloadEnv{lim: lim}
	hs := httptest.NewServer(New(e.lim, Config{}))
	t.Cleanup(hs.Close)
	e.url = hs.URL
	return e
}

func (e *reloadEnv) setRules(t *testing.T, set *rules.Set) {
	t.Helper()
	e.lim.SetRules(limitertest.Compile(t, set))
}

// check sends body to POST /ratelimit/check and decodes the 200 answer.
func (e *reloadEnv) check(t *testing.T, body string) answer {
	t.Helper()
	resp, err := http.Post(e.url+"/ratelimit/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST /ratelimit/check: %v", err)
	}
	defer resp.Body.Close()
	var a answer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /ratelimit/check %s: status %d, decode error %v; want 200 and an answer", body, resp.StatusCode, err)
	}
	return a
}

// allowed makes n checks of body and reports how many were allowed.
func (e *reloadEnv) allowed(t *testing.T, body string, n int) int {
	t.Helper()
	got := 0
	for range n {
		if e.check(t, body).Allowed {
			got++
		}
	}
	return got
}

// TestRuleChangesApplyToTheCheckAPI: a rule change put in force on the
// limiter decides the next POST /ratelimit/check, on buckets that already
// exist, with no time passing: a raised limit lets more calls through, a
// lowered one denies, a removed rule stops limiting, a new one starts.
func TestRuleChangesApplyToTheCheckAPI(t *testing.T) {
	fw := func(id, endpoint string, limit int64) rules.Rule {
		return rules.Rule{ID: id, Match: rules.Match{Endpoint: endpoint}, Limit: limit,
			Window: seconds(time.Hour), Algorithm: algorithm.FixedWindow}
	}
	const body = `{"user":"alice","endpoint":"GET /api/orders"}`

	t.Run("raised", func(t *testing.T) {
		e := newReloadEnv(t, &rules.Set{Revision: 1, Rules: []rules.Rule{fw("r", "", 2)}})
		if got := e.allowed(t, body, 3); got != 2 {
			t.Fatalf("under limit 2: %d of 3 allowed, want 2", got)
		}
		e.setRules(t, &rules.Set{Revision: 2, Rules: []rules.Rule{fw("r", "", 5)}})
		a := e.check(t, body)
		if !a.Allowed || a.Limit != 5 || a.Remaining != 2 {
			t.Fatalf("raised to 5 after 2 calls: %s, want allowed, limit 5, 2 remaining", fmtAnswer(a))
		}
		if got := e.allowed(t, body, 3); got != 2 {
			t.Fatalf("then %d of 3 allowed, want 2", got)
		}
	})
	t.Run("lowered", func(t *testing.T) {
		e := newReloadEnv(t, &rules.Set{Revision: 1, Rules: []rules.Rule{fw("r", "", 5)}})
		if got := e.allowed(t, body, 2); got != 2 {
			t.Fatalf("under limit 5: %d of 2 allowed, want 2", got)
		}
		e.setRules(t, &rules.Set{Revision: 2, Rules: []rules.Rule{fw("r", "", 2)}})
		if a := e.check(t, body); a.Allowed || a.Limit != 2 || a.Rule == nil || *a.Rule != "r" {
			t.Fatalf("lowered to 2 after 2 calls: %s, want denied by r, limit 2", fmtAnswer(a))
		}
	})
	t.Run("removed", func(t *testing.T) {
		e := newReloadEnv(t, &rules.Set{Revision: 1, Rules: []rules.Rule{fw("r", "", 1)}})
		if got := e.allowed(t, body, 2); got != 1 {
			t.Fatalf("under limit 1: %d of 2 allowed, want 1", got)
		}
		e.setRules(t, &rules.Set{Revision: 2})
		if a := e.check(t, body); !a.Allowed || a.Rule != nil || a.Client != nil {
			t.Fatalf("after the rule's removal: %s, want allowed with rule and client null", fmtAnswer(a))
		}
	})
	t.Run("added", func(t *testing.T) {
		e := newReloadEnv(t, &rules.Set{Revision: 1, Rules: []rules.Rule{fw("other", "POST /login", 1)}})
		if got := e.allowed(t, body, 3); got != 3 {
			t.Fatalf("with no rule on the endpoint: %d of 3 allowed, want 3", got)
		}
		e.setRules(t, &rules.Set{Revision: 2, Rules: []rules.Rule{fw("other", "POST /login", 1), fw("orders", "GET /api/orders", 1)}})
		if got := e.allowed(t, body, 3); got != 1 {
			t.Fatalf("after adding orders (limit 1): %d of 3 allowed, want 1", got)
		}
		if a := e.check(t, body); a.Allowed || a.Rule == nil || *a.Rule != "orders" || a.Client == nil || *a.Client != "user:alice" {
			t.Fatalf("next call: %s, want denied by orders for user:alice", fmtAnswer(a))
		}
	})
}
