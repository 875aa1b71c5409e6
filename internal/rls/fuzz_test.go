package rls

import (
	"context"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/memory"
)

// FuzzShouldRateLimit feeds requests of two descriptors to a server over
// the embedded store: it answers or says InvalidArgument, never panics, and
// what it accepts reads as a valid check.
func FuzzShouldRateLimit(f *testing.F) {
	f.Add("edge", "user", "alice", "remote_address", "203.0.113.7", "path", "/a?b", uint32(0), uint64(0), false)
	f.Add("edge", "method", "GET", "path", "/login", "plan", "free", uint32(3), uint64(5), true)
	f.Add("", "", "", "ip", "[::1]", "x", "y", uint32(1_000_000_001), uint64(1), true)
	f.Add("d", "user", "a\x00", "api_key", "k", "path", "/ x", uint32(1), uint64(1_000_000_001), true)
	st, err := memory.New(memory.DefaultConfig())
	if err != nil {
		f.Fatal(err)
	}
	defer st.Close()
	s := New(st, Config{})
	ix, err := rules.Compile(&rules.Set{Rules: []rules.Rule{
		{ID: "u", By: rules.ByUser, Limit: 5, Window: rules.Duration(time.Minute)},
		{ID: "e", Match: rules.Match{Domain: "edge", Endpoint: "* /login"}, By: rules.ByIP, Limit: 1, Window: rules.Duration(time.Minute)},
	}})
	if err != nil {
		f.Fatal(err)
	}
	s.SetRules(ix)
	f.Fuzz(func(t *testing.T, domain, k1, v1, k2, v2, k3, v3 string, hits uint32, dhits uint64, setD bool) {
		d2 := &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: k2, Value: v2}, {Key: k3, Value: v3}}}
		if setD {
			d2.HitsAddend = wrapperspb.UInt64(dhits)
		}
		req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits, Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: k1, Value: v1}}}, d2}}
		calls := make([]call, 2)
		perr := parse(req, calls)
		resp, err := s.ShouldRateLimit(context.Background(), req)
		if (perr == nil) != (err == nil) {
			t.Fatalf("parse = %v but ShouldRateLimit = %v", perr, err)
		}
		if err != nil {
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), "rls: ") {
				t.Fatalf("ShouldRateLimit(%v) = %v, want InvalidArgument", req, err)
			}
			return
		}
		if len(resp.Statuses) != 2 || resp.OverallCode == rlsv3.RateLimitResponse_UNKNOWN {
			t.Fatalf("ShouldRateLimit(%v) = %v, want 2 statuses and a code", req, resp)
		}
		for _, c := range calls {
			r := c.req
			if r.Cost < 1 || r.Cost > MaxHitsAddend || strings.ContainsAny(r.Path, "?# ") ||
				r.Method != "" && r.Method != strings.ToUpper(r.Method) || strings.HasPrefix(r.IP, "[") {
				t.Fatalf("parse(%v) accepted %+v", req, r)
			}
		}
	})
}
