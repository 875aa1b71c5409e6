package rls_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/sluicehq/sluice/internal/rls"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
)

// A descriptor that matches more rules than one decision applies — the
// rules with no domain fill it, and its own limit or a rule on its entries
// comes on top — is OVER_LIMIT, never a gRPC error (which Envoy with
// failure_mode_deny false turns into "allow"); the denial is logged and
// counted, and takes nothing from the other descriptors.
func TestTooManyRulesIsOverLimit(t *testing.T) {
	set := &rules.Set{}
	for i := range limiter.MaxRulesPerCall {
		set.Rules = append(set.Rules, rules.Rule{ID: fmt.Sprintf("all-%d", i), By: rules.ByUser, Limit: 100, Window: minute})
	}
	set.Rules = append(set.Rules, rules.Rule{ID: "tenant", Match: rules.Match{Domain: "d", Entries: []rules.Entry{{Key: "user"}, {Key: "tenant"}}},
		By: "entry:tenant", Limit: 100, Window: minute})
	var log strings.Builder
	e := newEnvWith(t, set, func(c *rls.Config) { c.Logger = slog.New(slog.NewTextHandler(&log, nil)) })

	withOwn := func(kv ...string) *ratelimitv3.RateLimitDescriptor {
		d := desc(kv...)
		d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 10, Unit: typev3.RateLimitUnit_MINUTE}
		return d
	}
	for name, req := range map[string]*rlsv3.RateLimitRequest{
		"own limit":             request("d", withOwn("user", "alice")),
		"entries":               request("d", desc("user", "alice", "tenant", "acme")),
		"own limit, two":        request("d", withOwn("user", "alice"), desc("user", "bob")),
		"entries, two":          request("d", desc("user", "alice", "tenant", "acme"), desc("user", "bob")),
		"entries, own on other": request("d", desc("user", "alice", "tenant", "acme"), withOwn("user", "bob")),
	} {
		t.Run(name, func(t *testing.T) {
			for i := range 3 {
				resp := e.call(t, req)
				if resp.OverallCode != over || resp.Statuses[0].Code != over {
					t.Fatalf("call %d = %v, want OVER_LIMIT", i+1, resp)
				}
			}
		})
	}
	// Nothing was taken from bob or alice: their one rule set is whole.
	for _, u := range []string{"alice", "bob"} {
		if st := e.call(t, request("d", desc("user", u))).Statuses[0]; st.Code != ok || st.LimitRemaining != 99 {
			t.Errorf("%s alone = %v, want OK with 99 remaining", u, st)
		}
	}
	if !strings.Contains(log.String(), "too many rules") {
		t.Errorf("log = %q, want the denial logged", log.String())
	}
	if n := counter(t, e, "sluice_decisions_total", map[string]string{"outcome": "denied", "rule": ""}); n < 15 {
		t.Errorf("denied decisions without a rule = %v, want at least 15", n)
	}
}
