package rls_test

import (
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/rules"
)

// Where sluice answers better than envoyproxy/ratelimit (docs/envoy.md,
// "Where sluice answers differently"), each shown on the embedded store
// and on Redis.

// TestDeniedCallTakesNothing: a request denied by one descriptor takes
// nothing from any: after 20 denied requests, the other descriptor still
// has what it had (envoyproxy/ratelimit counts every one of them, and the
// caller retrying against one exhausted limit drains the others).
func TestDeniedCallTakesNothing(t *testing.T) {
	set := &rules.Set{Rules: []rules.Rule{
		{ID: "a", Match: rules.Match{Domain: "d", Entries: []rules.Entry{{Key: "a"}}}, By: "entry:a", Limit: 1, Window: rules.Duration(time.Hour), Algorithm: algorithm.FixedWindow},
		{ID: "b", Match: rules.Match{Domain: "d", Entries: []rules.Entry{{Key: "b"}}}, By: "entry:b", Limit: 5, Window: rules.Duration(time.Hour), Algorithm: algorithm.FixedWindow},
	}}
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnvStore(t, set, name, newStore(t), nil)
			req := request("d", desc("a", "1"), desc("b", "1"))
			if resp := e.call(t, req); resp.OverallCode != ok {
				t.Fatalf("call 1 = %v, want OK", resp.OverallCode)
			}
			for i := range 20 {
				if resp := e.call(t, req); resp.OverallCode != over {
					t.Fatalf("call %d = %v, want OVER_LIMIT", i+2, resp.OverallCode)
				}
			}
			if st := e.call(t, request("d", desc("b", "1"))).Statuses[0]; st.Code != ok || st.LimitRemaining != 3 {
				t.Errorf("b alone after 20 denied requests = %v, want OK with 3 remaining (4 before it: only the allowed call took)", st)
			}
		})
	}
}

// TestUnknownUnitDecides: a descriptor's own limit of unit UNKNOWN (which
// envoyproxy/ratelimit cannot turn into a window: it panics) is answered:
// the configured rules decide, as without the limit.
func TestUnknownUnitDecides(t *testing.T) {
	set := &rules.Set{Rules: []rules.Rule{
		{ID: "t", Match: rules.Match{Domain: "d", Entries: []rules.Entry{{Key: "tenant"}}}, By: "entry:tenant", Limit: 1, Window: rules.Duration(time.Hour), Algorithm: algorithm.FixedWindow},
	}}
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnvStore(t, set, name, newStore(t), nil)
			d := desc("tenant", "acme")
			d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 100, Unit: typev3.RateLimitUnit_UNKNOWN}
			for i, want := range []rlsv3.RateLimitResponse_Code{ok, over} {
				if st := e.call(t, request("d", d)).Statuses[0]; st.Code != want || st.CurrentLimit.GetRequestsPerUnit() != 1 {
					t.Errorf("call %d with a limit of unit UNKNOWN = %v, want %v under the configured limit of 1", i+1, st, want)
				}
			}
		})
	}
}

// TestRaisedLimitNotMasked: once a limit is raised, the next call is
// decided under the new limit at once — the Redis store's local denial
// cache drops a denial made under other parameters — where
// envoyproxy/ratelimit's local cache keeps denying until the end of the
// window.
func TestRaisedLimitNotMasked(t *testing.T) {
	rule := func(limit int64) *rules.Set {
		return &rules.Set{Rules: []rules.Rule{{ID: "per-ip", Limit: limit, Window: rules.Duration(time.Hour), By: rules.ByIP, Algorithm: algorithm.FixedWindow}}}
	}
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnvStore(t, rule(1), name, newStore(t), nil)
			req := request("d", desc("remote_address", "203.0.113.7"))
			for i, want := range []rlsv3.RateLimitResponse_Code{ok, over, over} { // the third from the denial cache on Redis
				if resp := e.call(t, req); resp.OverallCode != want {
					t.Fatalf("call %d under a limit of 1 = %v, want %v", i+1, resp.OverallCode, want)
				}
			}
			if got := counter(t, e, "sluice_decisions_total", map[string]string{"rule": "per-ip", "outcome": "denied", "source": "local_denial_cache"}); name == "redis" && got != 1 {
				t.Fatalf("denials from the local denial cache = %v, want 1 (the third call)", got)
			}
			e.srv.SetRules(limitertest.Compile(t, rule(5)))
			if st := e.call(t, req).Statuses[0]; st.Code != ok || st.LimitRemaining != 3 {
				t.Errorf("the call after the limit was raised to 5 = %v, want OK with 3 remaining", st)
			}
		})
	}
}

// TestDeniedCallReportsWhatStands: the descriptors of a denied request
// that would have allowed report the limit_remaining their buckets hold —
// nothing was taken from them, so what a hits_addend 0 check reads — not
// what would remain had the call passed, on every algorithm; a descriptor
// sent twice beside the one that denies included (one bucket, two hits
// not taken).
func TestDeniedCallReportsWhatStands(t *testing.T) {
	for name, newStore := range stores(t) {
		for _, alg := range []algorithm.Kind{algorithm.TokenBucket, algorithm.LeakyBucket, algorithm.FixedWindow, algorithm.SlidingWindow, algorithm.SlidingLog} {
			t.Run(name+"/"+alg.String(), func(t *testing.T) {
				set := &rules.Set{Rules: []rules.Rule{
					{ID: "a", Match: rules.Match{Domain: "d", Entries: []rules.Entry{{Key: "a"}}}, By: "entry:a", Limit: 1, Window: rules.Duration(time.Hour), Algorithm: algorithm.FixedWindow},
					{ID: "b", Match: rules.Match{Domain: "d", Entries: []rules.Entry{{Key: "b"}}}, By: "entry:b", Limit: 10, Window: rules.Duration(time.Hour), Algorithm: alg},
				}}
				if alg == algorithm.LeakyBucket {
					set.Rules[1].Burst = 9 // room for 10, as the others have
				}
				e := newEnvStore(t, set, name, newStore(t), nil)
				if resp := e.call(t, request("d", desc("a", "1"), desc("b", "1"))); resp.OverallCode != ok {
					t.Fatalf("call 1 = %v, want OK", resp.OverallCode)
				}
				check := desc("b", "1")
				check.HitsAddend = wrapperspb.UInt64(0)
				stands := e.call(t, request("d", check)).Statuses[0].LimitRemaining
				if stands != 9 {
					t.Fatalf("b after one call = %d remaining, want 9", stands)
				}
				for i, req := range []*rlsv3.RateLimitRequest{
					request("d", desc("a", "1"), desc("b", "1")),
					request("d", desc("b", "1"), desc("a", "1"), desc("b", "1")),
				} {
					resp := e.call(t, req)
					if resp.OverallCode != over {
						t.Fatalf("request %d = %v, want OVER_LIMIT", i+2, resp.OverallCode)
					}
					for j, st := range resp.Statuses {
						if st.CurrentLimit.GetRequestsPerUnit() == 10 && (st.Code != ok || st.LimitRemaining != stands) {
							t.Errorf("request %d, status %d = %v, want OK with %d remaining (what b holds: nothing was taken)", i+2, j, st, stands)
						}
					}
				}
				if st := e.call(t, request("d", desc("b", "1"))).Statuses[0]; st.LimitRemaining != stands-1 {
					t.Errorf("b alone after the denied requests = %v, want %d remaining", st, stands-1)
				}
			})
		}
	}
}
