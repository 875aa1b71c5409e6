package rls_test

import (
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/envoyconf"
	"github.com/sluicehq/sluice/store/memory"
)

// quotaConf has two quota descriptors and a plain one, as
// envoyproxy/ratelimit's example configuration.
const quotaConf = `domain: q
descriptors:
  - key: product
    value: a
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: product
    value: b
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
`

// TestQuotaMode: a request passes while any of its quota descriptors is
// under its limit (a quota descriptor over its limit reports OVER_LIMIT
// and takes nothing), and is OVER_LIMIT when all of them are — taking
// nothing from any descriptor — or when a plain descriptor is over, as
// envoyproxy/ratelimit decides quota_mode.
func TestQuotaMode(t *testing.T) {
	set, _, err := envoyconf.Load([]envoyconf.File{{Name: "q.yaml", Data: []byte(quotaConf)}}, envoyconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mc := memory.DefaultConfig()
	mc.Clock = func() int64 { return 1_777_777_740_000_000 } // the start of a minute
	e := newEnvOn(t, set, mc, nil)
	type want struct {
		code      rlsv3.RateLimitResponse_Code
		remaining uint32
	}
	all := []*ratelimitv3.RateLimitDescriptor{desc("product", "a"), desc("product", "b"), desc("user", "u")}
	steps := []struct {
		ds      []*ratelimitv3.RateLimitDescriptor
		overall rlsv3.RateLimitResponse_Code
		want    []want
	}{
		{all, ok, []want{{ok, 0}, {ok, 1}, {ok, 9}}},
		// a is spent: reported over, the request passes on b.
		{all, ok, []want{{over, 0}, {ok, 0}, {ok, 8}}},
		// Both spent: the request is denied, and takes nothing from user.
		{all, over, []want{{over, 0}, {over, 0}, {ok, 8}}},
		{[]*ratelimitv3.RateLimitDescriptor{desc("user", "u")}, ok, []want{{ok, 7}}},
		// Its one quota descriptor spent: denied.
		{[]*ratelimitv3.RateLimitDescriptor{desc("product", "a"), desc("user", "u")}, over, []want{{over, 0}, {ok, 7}}},
		{[]*ratelimitv3.RateLimitDescriptor{desc("product", "b")}, over, []want{{over, 0}}},
	}
	for i, s := range steps {
		resp := e.call(t, request("q", s.ds...))
		if resp.OverallCode != s.overall {
			t.Errorf("step %d: overall %v, want %v", i, resp.OverallCode, s.overall)
		}
		for j, w := range s.want {
			st := resp.Statuses[j]
			if got := (want{st.Code, st.LimitRemaining}); got != w {
				t.Errorf("step %d, descriptor %d: %+v, want %+v", i, j, got, w)
			}
		}
	}
	// A plain descriptor over its limit denies, quota descriptors left or not.
	for range 7 {
		e.call(t, request("q", desc("user", "v")))
		e.call(t, request("q", desc("user", "v"), desc("user", "v2")))
	}
	e.call(t, request("q", desc("user", "v"), desc("user", "v2"), desc("user", "v3")))
	e.call(t, request("q", desc("user", "v"), desc("user", "v3")))
	resp := e.call(t, request("q", desc("product", "c"), desc("user", "v")))
	if resp.OverallCode != over {
		t.Errorf("a request with a plain descriptor over its limit: %v, want OVER_LIMIT", resp.OverallCode)
	}
}

// TestQuotaModeWithoutDomain: a quota rule that names no domain (a rule
// of sluice's own rules file, for every domain) is a quota rule in every
// domain's requests, as one that names its domain: a request passes on a
// quota descriptor under its limit while another is reported over.
func TestQuotaModeWithoutDomain(t *testing.T) {
	set, _, err := envoyconf.Load([]envoyconf.File{{Name: "q.yaml", Data: []byte(quotaConf)}}, envoyconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range set.Rules {
		set.Rules[i].Match.Domain = ""
	}
	for _, domain := range []string{"q", "any"} {
		t.Run(domain, func(t *testing.T) {
			mc := memory.DefaultConfig()
			mc.Clock = func() int64 { return 1_777_777_740_000_000 } // the start of a minute
			e := newEnvOn(t, set, mc, nil)
			all := []*ratelimitv3.RateLimitDescriptor{desc("product", "a"), desc("product", "b"), desc("user", "u")}
			for i, s := range []struct {
				overall rlsv3.RateLimitResponse_Code
				codes   []rlsv3.RateLimitResponse_Code
			}{
				{ok, []rlsv3.RateLimitResponse_Code{ok, ok, ok}},
				{ok, []rlsv3.RateLimitResponse_Code{over, ok, ok}}, // a is spent: the request passes on b
				{over, []rlsv3.RateLimitResponse_Code{over, over, ok}},
			} {
				resp := e.call(t, request(domain, all...))
				if resp.OverallCode != s.overall {
					t.Errorf("step %d: overall %v, want %v", i, resp.OverallCode, s.overall)
				}
				for j, c := range s.codes {
					if resp.Statuses[j].Code != c {
						t.Errorf("step %d, descriptor %d: %v, want %v", i, j, resp.Statuses[j].Code, c)
					}
				}
			}
		})
	}
}
