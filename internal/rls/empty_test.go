package rls_test

import (
	"context"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/envoyconf"
	"github.com/sluicehq/sluice/rules"
)

// TestEmptyValueMatchesKey: an entry with an empty value — what Envoy
// sends for a header that is present but empty — matches the key
// without a value, as in envoyproxy/ratelimit, and is a bucket of its
// own: (key3, "") at 1 an hour is OK, then OVER_LIMIT.
func TestEmptyValueMatchesKey(t *testing.T) {
	set, _, err := envoyconf.Load([]envoyconf.File{{Name: "c.yaml", Data: []byte(`
domain: d
descriptors:
  - key: key3
    rate_limit: {unit: hour, requests_per_unit: 1}
`)}}, envoyconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnvStore(t, set, name, newStore(t), nil)
			for i, want := range []rlsv3.RateLimitResponse_Code{ok, over} {
				resp := e.call(t, request("d", desc("key3", "")))
				if st := resp.Statuses[0]; st.Code != want || st.CurrentLimit.GetRequestsPerUnit() != 1 {
					t.Errorf("call %d of (key3, \"\") = %v, want %v under a limit of 1", i+1, st, want)
				}
			}
			// Another value is another bucket.
			if resp := e.call(t, request("d", desc("key3", "x"))); resp.OverallCode != ok {
				t.Errorf("(key3, x) = %v, want OK", resp.OverallCode)
			}
		})
	}
}

// TestEmptyDescriptor: a descriptor with no entries — what Envoy sends
// when every action of a rate_limits entry is skip_if_absent and absent —
// is OK for itself, and the request's other descriptors are decided as
// without it: never InvalidArgument, which Envoy turns into "allow" for
// all of them.
func TestEmptyDescriptor(t *testing.T) {
	set := &rules.Set{Rules: []rules.Rule{
		{ID: "per-ip", Limit: 1, Window: rules.Duration(time.Hour), By: rules.ByIP},
		{ID: "phone", Limit: 1, Window: rules.Duration(time.Hour), By: "entry:phone", Match: rules.Match{Domain: "sms", Entries: []rules.Entry{{Key: "phone"}}}},
	}}
	empty := &ratelimitv3.RateLimitDescriptor{}
	for _, tt := range []struct {
		name, domain string
		other        *ratelimitv3.RateLimitDescriptor
	}{
		{"merged", "edge", desc("remote_address", "203.0.113.7")},
		{"each on its own", "sms", desc("phone", "555")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, set)
			for i, want := range []rlsv3.RateLimitResponse_Code{ok, over} {
				resp := e.call(t, request(tt.domain, empty, tt.other, empty))
				if resp.OverallCode != want {
					t.Errorf("call %d: overall %v, want %v", i+1, resp.OverallCode, want)
				}
				for _, j := range []int{0, 2} {
					if st := resp.Statuses[j]; st.Code != ok || st.CurrentLimit != nil {
						t.Errorf("call %d: the empty descriptor %d = %v, want OK without a limit", i+1, j, st)
					}
				}
				if st := resp.Statuses[1]; st.Code != want || st.CurrentLimit.GetRequestsPerUnit() != 1 {
					t.Errorf("call %d: the other descriptor = %v, want %v under a limit of 1", i+1, st, want)
				}
			}
			if resp := e.call(t, request(tt.domain, empty)); resp.OverallCode != ok || resp.Statuses[0].CurrentLimit != nil {
				t.Errorf("a request of one empty descriptor = %v, want OK without a limit", resp)
			}
		})
	}
}

// TestLargeRequestDecides: a request past gRPC's default 4 MiB — Envoy
// accepts request headers up to 8 MiB and copies them into descriptors —
// gets a decision, never ResourceExhausted (which Envoy turns into
// "allow"): a path of 8 MiB in two descriptors is OVER_LIMIT once the
// address has used its budget.
func TestLargeRequestDecides(t *testing.T) {
	e := newEnv(t, &rules.Set{Rules: []rules.Rule{
		{ID: "per-ip", Limit: 1, Window: rules.Duration(time.Hour), By: rules.ByIP},
	}})
	path := "/" + strings.Repeat("a", 8<<20)
	for _, n := range []int{1, 2} {
		var ds []*ratelimitv3.RateLimitDescriptor
		for range n {
			ds = append(ds, desc("remote_address", "203.0.113.7", "method", "GET", "path", path))
		}
		want := ok
		if n > 1 {
			want = over
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		resp, err := e.client.ShouldRateLimit(ctx, request("edge", ds...))
		cancel()
		switch {
		case err != nil:
			t.Errorf("a request of %d descriptors with a path of 8 MiB: %v, want %v", n, status.Code(err), want)
		case resp.OverallCode != want:
			t.Errorf("a request of %d descriptors with a path of 8 MiB = %v, want %v", n, resp.OverallCode, want)
		}
	}
}
