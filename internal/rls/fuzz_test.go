package rls

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/memory"
)

// FuzzShouldRateLimit feeds requests of two descriptors to a server over
// the embedded store: it never panics, and it answers with a decision
// unless the request is wrong in what the operator's Envoy configuration
// decides (no domain, an entry without a key), which is InvalidArgument;
// any hits_addend decides. Whatever the values of user, api_key, ip,
// plan, method and path, it decides.
func FuzzShouldRateLimit(f *testing.F) {
	f.Add("edge", "user", "alice", "remote_address", "203.0.113.7", "path", "/a?b", uint32(0), uint64(0), false)
	f.Add("edge", "method", "GET", "path", "/login", "plan", "free", uint32(3), uint64(5), true)
	f.Add("", "", "", "ip", "[::1]", "x", "y", uint32(1_000_000_001), uint64(1), true)
	f.Add("d", "user", "a\x00", "api_key", "k", "path", "/ x", uint32(1), uint64(1_000_000_001), true)
	s := New(limitertest.Store(f, memory.DefaultConfig()), Config{})
	s.SetRules(limitertest.Compile(f, &rules.Set{Rules: []rules.Rule{
		{ID: "u", By: rules.ByUser, Limit: 5, Window: rules.Duration(time.Minute)},
		{ID: "e", Match: rules.Match{Domain: "edge", Endpoint: "* /login"}, By: rules.ByIP, Limit: 1, Window: rules.Duration(time.Minute)},
	}}))
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
		operator := domain == "" || len(domain) > MaxDomain || k1 == "" || k2 == "" || k3 == ""
		if err != nil {
			if st := status.Convert(err); !operator || st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), "rls: ") {
				t.Fatalf("ShouldRateLimit(%v) = %v, want a decision", req, err)
			}
			return
		}
		if operator && (domain == "" || k1 == "") {
			t.Fatalf("ShouldRateLimit(%v) = %v, want InvalidArgument", req, resp)
		}
		if len(resp.Statuses) != 2 || resp.OverallCode == rlsv3.RateLimitResponse_UNKNOWN {
			t.Fatalf("ShouldRateLimit(%v) = %v, want 2 statuses and a code", req, resp)
		}
		if _, err := proto.Marshal(resp); err != nil {
			t.Fatalf("the answer to %v does not marshal: %v", req, err)
		}
		for _, c := range calls {
			if r := c.req; r.Cost < 0 || r.Cost > overCost || (r.Cost == 0) != r.Peek {
				t.Fatalf("parse(%v) accepted %+v", req, r)
			}
		}
	})
}

// FuzzUnmarshalRequest: the codec's reader of RateLimitRequest never
// panics, reads what protobuf-go reads (unknown fields dropped), and also
// reads strings that are not UTF-8, which protobuf-go refuses.
func FuzzUnmarshalRequest(f *testing.F) {
	for _, r := range []*rlsv3.RateLimitRequest{
		{Domain: "edge", HitsAddend: 3, Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}, {Key: "path", Value: "/a?b"}},
				HitsAddend: wrapperspb.UInt64(7), IsNegativeHits: true,
				Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: 2}}}},
		{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{{}, {}}},
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("\x0a\x02\xff\xfe\x12\x07\x0a\x05\x0a\x01u\x12\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var got rlsv3.RateLimitRequest
		err := unmarshalRequest(b, &got)
		var want rlsv3.RateLimitRequest
		werr := proto.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, &want)
		if werr == nil {
			if err != nil || !proto.Equal(&got, &want) {
				t.Fatalf("unmarshalRequest(%x) = %v, %v; protobuf-go read %v", b, &got, err, &want)
			}
			return
		}
		// A string field given twice keeps its last value, so a refusal for
		// invalid UTF-8 may concern a value that was then replaced.
		if err == nil && utf8.ValidString(got.Domain) && allUTF8(&got) && !strings.Contains(werr.Error(), "invalid UTF-8") {
			// protobuf-go refused for a reason other than UTF-8: the wire
			// must be malformed, and unmarshalRequest should have said so.
			t.Fatalf("unmarshalRequest(%x) = %v, but protobuf-go says %v", b, &got, werr)
		}
	})
}

func allUTF8(r *rlsv3.RateLimitRequest) bool {
	for _, d := range r.Descriptors {
		for _, e := range d.Entries {
			if !utf8.ValidString(e.Key) || !utf8.ValidString(e.Value) {
				return false
			}
		}
	}
	return true
}
