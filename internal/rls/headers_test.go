package rls_test

import (
	"strconv"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/envoyconf"
	"github.com/sluicehq/sluice/internal/rls"
	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/memory"
)

// TestDefaultAnswerAddsNothing: by default the Envoy API adds what
// envoyproxy/ratelimit adds without LIMIT_RESPONSE_HEADERS_ENABLED —
// nothing: no header and no body, allowed or denied. sluice's quota
// headers and 429 body come with Config.QuotaHeaders.
func TestDefaultAnswerAddsNothing(t *testing.T) {
	set := &rules.Set{Rules: []rules.Rule{{ID: "per-ip", Limit: 1, Window: minute, By: rules.ByIP}}}
	st := limitertest.Store(t, memory.DefaultConfig())
	e := newEnvStore(t, set, "memory", st, func(c *rls.Config) { *c = rls.Config{} })
	req := request("d", desc("remote_address", "203.0.113.7"))
	for i, want := range []rlsv3.RateLimitResponse_Code{ok, over} {
		resp := e.call(t, req)
		if resp.OverallCode != want || len(resp.ResponseHeadersToAdd) != 0 || resp.RawBody != nil {
			t.Errorf("call %d = %v, headers %v, body %q; want %v with no header and no body", i+1, resp.OverallCode, resp.ResponseHeadersToAdd, resp.RawBody, want)
		}
	}
	q := newEnvStore(t, set, "memory", limitertest.Store(t, memory.DefaultConfig()), func(c *rls.Config) { *c = rls.Config{QuotaHeaders: true} })
	q.call(t, req)
	resp := q.call(t, req)
	if h := hdrs(resp); h.Get("X-RateLimit-Limit") != "1" || h.Get("Retry-After") == "" || resp.RawBody == nil {
		t.Errorf("with QuotaHeaders: headers %v, body %q; want sluice's quota headers, Retry-After and the 429 body", h, resp.RawBody)
	}
}

// TestEnvoyHeadersPickAsEnvoyproxy: with EnvoyHeaders, the answer carries
// exactly envoyproxy/ratelimit's three headers, under the names
// configured, for the descriptor it picks: the last one OVER_LIMIT, else
// the first with the least limit_remaining among those with a limit.
func TestEnvoyHeadersPickAsEnvoyproxy(t *testing.T) {
	set := &rules.Set{Rules: []rules.Rule{
		{ID: "a", Match: rules.Match{Domain: "d", Entries: []rules.Entry{{Key: "a"}}}, By: "entry:a", Limit: 10, Window: minute, Algorithm: algorithm.FixedWindow},
		{ID: "b", Match: rules.Match{Domain: "d", Entries: []rules.Entry{{Key: "b"}}}, By: "entry:b", Limit: 3, Window: rules.Duration(time.Hour), Algorithm: algorithm.FixedWindow},
		{ID: "c", Match: rules.Match{Domain: "d", Entries: []rules.Entry{{Key: "c"}}}, By: "entry:c", Limit: 4, Window: minute, Algorithm: algorithm.FixedWindow},
	}}
	e := newEnvWith(t, set, func(c *rls.Config) {
		*c = rls.Config{EnvoyHeaders: true, EnvoyLimitHeader: "X-Lim", EnvoyRemainingHeader: "X-Rem", EnvoyResetHeader: "X-Reset"}
	})
	// b (3) and c (4, a call of 2) both leave 2: the first of them, b, is
	// picked.
	two := desc("c", "1")
	two.HitsAddend = wrapperspb.UInt64(2)
	resp := e.call(t, request("d", desc("a", "1"), desc("b", "1"), two))
	h := hdrs(resp)
	if reset, _ := strconv.Atoi(h.Get("X-Reset")); len(resp.ResponseHeadersToAdd) != 3 || h.Get("X-Lim") != "3" || h.Get("X-Rem") != "2" || reset < 1 || reset > 3600 {
		t.Errorf("headers %v, want exactly X-Lim 3, X-Rem 2 and X-Reset of b", resp.ResponseHeadersToAdd)
	}
	// c over its limit (a cost of 3 where 2 remain): it is picked, though
	// b leaves as few and comes first.
	hits := desc("c", "1")
	hits.HitsAddend = wrapperspb.UInt64(3)
	resp = e.call(t, request("d", desc("a", "1"), desc("b", "2"), hits))
	h = hdrs(resp)
	if reset, _ := strconv.Atoi(h.Get("X-Reset")); resp.OverallCode != over || h.Get("X-Lim") != "4" || h.Get("X-Rem") != "2" || reset > 60 || reset < 1 {
		t.Errorf("= %v, headers %v; want OVER_LIMIT with c's X-Lim 4, X-Rem 2, X-Reset within a minute", resp.OverallCode, resp.ResponseHeadersToAdd)
	}
}

// TestCurrentLimitName: current_limit.name is what the configuration
// names: an envoyproxy/ratelimit descriptor's rate_limit.name, empty
// without one, as envoyproxy/ratelimit answers; a descriptor's own limit
// has none either. A sluice rule is named by its name, else its id.
func TestCurrentLimitName(t *testing.T) {
	set, _, err := envoyconf.Load([]envoyconf.File{{Name: "c.yaml", Data: []byte(`
domain: d
descriptors:
  - key: named
    rate_limit: {unit: minute, requests_per_unit: 5, name: the-name}
  - key: nameless
    rate_limit: {unit: minute, requests_per_unit: 5}
`)}}, envoyconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	set.Rules = append(set.Rules, rules.Rule{ID: "per-user", Limit: 5, Window: minute, By: rules.ByUser})
	e := newEnv(t, set)
	own := desc("tenant", "acme")
	own.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_MINUTE}
	for _, tt := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{"named", request("d", desc("named", "x")), "the-name"},
		{"nameless", request("d", desc("nameless", "x")), ""},
		{"own limit", request("d", own), ""},
		{"sluice rule", request("d", desc("user", "alice")), "per-user"},
	} {
		resp := e.call(t, request(tt.req.Domain, tt.req.Descriptors...))
		if cl := resp.Statuses[0].CurrentLimit; cl == nil || cl.Name != tt.want {
			t.Errorf("%s: current_limit %v, want name %q", tt.name, cl, tt.want)
		}
	}
}

// TestEnvoyHeadersPickQuota: a quota descriptor over its limit is not
// "the last one OVER_LIMIT" envoyproxy/ratelimit's headers describe; its
// headers then describe the first with the least limit_remaining. Two
// quota descriptors, 1 and 2 a minute, both spent: the headers are the
// first's (RateLimit-Limit 1), as envoyproxy/ratelimit answers its
// quota.sh scenario.
func TestEnvoyHeadersPickQuota(t *testing.T) {
	entry := func(v string) []rules.Entry { return []rules.Entry{{Key: "service", Value: v}} }
	set := &rules.Set{Rules: []rules.Rule{
		{ID: "s1", Match: rules.Match{Domain: "d", Entries: entry("s1")}, By: rules.ByGlobal, Limit: 1, Window: minute, Algorithm: algorithm.FixedWindow, Quota: true},
		{ID: "s2", Match: rules.Match{Domain: "d", Entries: entry("s2")}, By: rules.ByGlobal, Limit: 2, Window: minute, Algorithm: algorithm.FixedWindow, Quota: true},
		{ID: "p", Match: rules.Match{Domain: "d", Entries: []rules.Entry{{Key: "p"}}}, By: "entry:p", Limit: 1, Window: minute, Algorithm: algorithm.FixedWindow},
	}}
	mc := memory.DefaultConfig()
	mc.Clock = func() int64 { return 1_777_777_740_000_000 } // the start of a minute
	e := newEnvOn(t, set, mc, func(c *rls.Config) { *c = rls.Config{EnvoyHeaders: true} })
	for i, want := range []struct {
		code  rlsv3.RateLimitResponse_Code
		limit string
	}{{ok, "1"}, {ok, "1"}, {over, "1"}} {
		resp := e.call(t, request("d", desc("service", "s1"), desc("service", "s2")))
		if h := hdrs(resp); resp.OverallCode != want.code || h.Get(rls.EnvoyLimitHeader) != want.limit {
			t.Errorf("call %d = %v, headers %v; want %v with %s %s", i+1, resp.OverallCode, resp.ResponseHeadersToAdd, want.code, rls.EnvoyLimitHeader, want.limit)
		}
	}
	// A plain descriptor over its limit is picked, though a spent quota
	// descriptor follows it.
	e.call(t, request("d", desc("p", "x")))
	resp := e.call(t, request("d", desc("p", "x"), desc("service", "s2")))
	if h := hdrs(resp); resp.OverallCode != over || h.Get(rls.EnvoyLimitHeader) != "1" || h.Get(rls.EnvoyRemainingHeader) != "0" {
		t.Errorf("= %v, headers %v; want OVER_LIMIT with p's limit 1", resp.OverallCode, resp.ResponseHeadersToAdd)
	}
}
