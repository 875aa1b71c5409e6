package rls_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/envoyconf"
	"github.com/sluicehq/sluice/internal/rls"
	"github.com/sluicehq/sluice/internal/testkit/rlstest"
	"github.com/sluicehq/sluice/rules"
)

// explainConf adds to rlstest.Features a domain in quota mode, one with a
// shadow rule and one whose rule takes charges (charge: after_response,
// set below). Every window is an hour, so that no row crosses one.
const explainConf = `domain: q
descriptors:
  - key: product
    value: a
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: product
    value: b
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
---
domain: s
descriptors:
  - key: k
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: j
    rate_limit: {unit: hour, requests_per_unit: 2}
---
domain: c
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
`

// dstatus is what a test compares of a descriptor's status.
type dstatus struct {
	Code      rlsv3.RateLimitResponse_Code
	Remaining uint32
}

// explained turns Explain's answer into the overall code and one status
// per descriptor, as ShouldRateLimit would write them.
func explained(n int, checks []rls.Explained, over bool) (rlsv3.RateLimitResponse_Code, []dstatus) {
	code := rlsv3.RateLimitResponse_OK
	if over {
		code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	out := make([]dstatus, n)
	for _, c := range checks {
		st := dstatus{Code: rlsv3.RateLimitResponse_OK}
		d := &c.Explanation.Decision
		switch {
		case c.Empty:
		case c.Over:
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		switch {
		case c.Empty:
		case d.Rule == nil && d.Unlimited:
			st.Remaining = math.MaxUint32
		case d.Rule != nil:
			st.Remaining = uint32(min(max(d.Remaining, 0), math.MaxUint32))
		}
		for _, i := range c.Descriptors {
			out[i] = st
		}
	}
	return code, out
}

// TestExplainIsTheDecision is a differential test of Explain: for each
// step of each row, on the embedded store and on Redis, Explain's overall
// code and each descriptor's code and remaining are what ShouldRateLimit
// then answers; Explain twice says the same; and the real answers are
// those of a twin server nobody explained to (Explain took nothing).
func TestExplainIsTheDecision(t *testing.T) {
	files := []envoyconf.File{{Name: "feat.yaml", Data: []byte(rlstest.Features)}}
	for i, doc := range strings.Split(explainConf, "\n---\n") {
		files = append(files, envoyconf.File{Name: fmt.Sprintf("x%d.yaml", i), Data: []byte(doc)})
	}
	d := func(ds ...*ratelimitv3.RateLimitDescriptor) []*ratelimitv3.RateLimitDescriptor { return ds }
	hits := func(n uint64, kv ...string) *ratelimitv3.RateLimitDescriptor {
		x := desc(kv...)
		x.HitsAddend = wrapperspb.UInt64(n)
		return x
	}
	north, south := desc("area", "north", "member", "kim"), desc("area", "south", "member", "kim")
	type step struct {
		domain string
		hits   uint32 // the request's hits_addend
		ds     []*ratelimitv3.RateLimitDescriptor
	}
	rep := func(n int, s step) []step {
		out := make([]step, n)
		for i := range out {
			out[i] = s
		}
		return out
	}
	cat := func(ss ...[]step) []step {
		var out []step
		for _, s := range ss {
			out = append(out, s...)
		}
		return out
	}
	rows := []struct {
		name  string
		steps []step
	}{
		{"replaces across descriptors", cat(
			rep(1, step{"feat", 0, d(north)}),
			rep(4, step{"feat", 0, d(north, south)}),
			rep(2, step{"feat", 0, d(north)}),
			rep(2, step{"feat", 0, d(south, north)}),
			rep(2, step{"feat", 0, d(desc("vip", "x"), north)}),
		)},
		{"quota mode", cat(
			rep(3, step{"q", 0, d(desc("product", "a"), desc("product", "b"), desc("user", "u"))}),
			rep(1, step{"q", 0, d(desc("user", "u"))}),
			rep(1, step{"q", 0, d(desc("product", "a"), desc("user", "u"))}),
			rep(1, step{"q", 0, d(desc("product", "b"))}),
			rep(2, step{"q", 0, d(desc("product", "c"), desc("user", "w"))}),
		)},
		{"limit 0", cat(
			rep(2, step{"feat", 0, d(desc("client", "banned"))}),
			rep(1, step{"feat", 0, d(desc("client", "acme"), desc("client", "banned"))}),
			rep(1, step{"feat", 0, d(desc("client", "acme"))}),
		)},
		{"unlimited", cat(
			rep(2, step{"feat", 0, d(desc("client", "internal"))}),
			rep(2, step{"feat", 0, d(desc("client", "internal"), desc("client", "acme"))}),
			rep(1, step{"feat", 0, d(desc("client", "trusted"))}),
		)},
		{"shadow", cat(
			rep(3, step{"s", 0, d(desc("k", "x"))}),
			rep(3, step{"s", 0, d(desc("k", "x"), desc("j", "y"))}),
		)},
		{"several descriptors on one bucket", cat(
			rep(2, step{"feat", 0, d(desc("client", "acme"), desc("client", "acme"))}),
			rep(1, step{"feat", 0, d(desc("client", "acme"))}),
			rep(1, step{"feat", 0, d(desc("client", "acme"), desc("client", "zed"))}),
		)},
		{"hits_addend", cat(
			rep(1, step{"feat", 2, d(desc("client", "acme"))}),
			rep(1, step{"feat", 0, d(hits(0, "client", "acme"))}),
			rep(1, step{"feat", 5, d(desc("client", "acme"))}),
			rep(1, step{"feat", 1, d(hits(0, "client", "acme"), desc("client", "zed"))}),
			rep(2, step{"feat", 0, d(hits(2, "client", "acme"))}),
			rep(1, step{"feat", 0, d(hits(0, "client", "acme"))}),
		)},
		{"charges", cat(
			rep(1, step{"c", 0, d(hits(0, "user", "u"))}),
			rep(3, step{"c", 4, d(desc("user", "u"))}),
			rep(2, step{"c", 0, d(hits(0, "user", "u"))}),
			rep(1, step{"c", 0, d(hits(1, "user", "u"))}),
		)},
	}
	for name, newStore := range stores(t) {
		for _, row := range rows {
			t.Run(name+"/"+row.name, func(t *testing.T) {
				set, _, err := envoyconf.Load(files, envoyconf.Options{})
				if err != nil {
					t.Fatal(err)
				}
				for i := range set.Rules {
					if set.Rules[i].Match.Domain == "c" {
						set.Rules[i].Charge = rules.ChargeAfterResponse
					}
				}
				e := newEnvStore(t, set, name, newStore(t), nil)
				twin := newEnvStore(t, set, name, newStore(t), nil)
				for i, s := range row.steps {
					req := request(s.domain, s.ds...)
					req.HitsAddend = s.hits
					checks, over, err := e.srv.Explain(t.Context(), req)
					if err != nil {
						t.Fatalf("step %d: Explain = %v", i, err)
					}
					code, sts := explained(len(s.ds), checks, over)
					checks2, over2, err := e.srv.Explain(t.Context(), req)
					if err != nil {
						t.Fatalf("step %d: Explain = %v", i, err)
					}
					if code2, sts2 := explained(len(s.ds), checks2, over2); code2 != code || fmt.Sprint(sts2) != fmt.Sprint(sts) {
						t.Errorf("step %d: explained again %v %v, first %v %v", i, code2, sts2, code, sts)
					}
					resp := e.call(t, req)
					real := make([]dstatus, len(resp.Statuses))
					for j, st := range resp.Statuses {
						real[j] = dstatus{st.Code, st.LimitRemaining}
					}
					if resp.OverallCode != code || fmt.Sprint(real) != fmt.Sprint(sts) {
						t.Errorf("step %d %v: explained %v %v, ShouldRateLimit %v %v", i, s.ds, code, sts, resp.OverallCode, real)
					}
					tw := twin.call(t, req)
					for j, st := range tw.Statuses {
						if got := (dstatus{st.Code, st.LimitRemaining}); got != real[j] || tw.OverallCode != resp.OverallCode {
							t.Errorf("step %d, descriptor %d: %v %+v after Explain, %v %+v without", i, j, resp.OverallCode, real[j], tw.OverallCode, got)
						}
					}
				}
			})
		}
	}
}
