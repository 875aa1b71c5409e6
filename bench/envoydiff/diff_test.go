package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/rls"
	"github.com/sluicehq/sluice/internal/testkit/rlstest"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/memory"
)

// serve starts a sluice Envoy API on a memory store whose clock stands at
// the start of a minute, with rules giving key2 limit a minute, and
// returns a client of it.
func serve(t *testing.T, limit int64) rlsv3.RateLimitServiceClient {
	t.Helper()
	set := &rules.Set{Rules: []rules.Rule{
		{ID: "key2", Match: rules.Match{Domain: "another", Entries: []rules.Entry{{Key: "key2"}}}, By: "entry:key2",
			Limit: limit, Window: rules.Duration(time.Minute), Algorithm: algorithm.FixedWindow},
		{ID: "key3", Match: rules.Match{Domain: "another", Entries: []rules.Entry{{Key: "key3"}}}, By: "entry:key3",
			Limit: 10, Window: rules.Duration(time.Hour), Algorithm: algorithm.FixedWindow},
	}}
	mc := memory.DefaultConfig()
	mc.Clock = func() int64 { return 1_777_777_740_000_000 }
	return client(rlstest.ServeOn(t, set, mc, rls.Config{EnvoyHeaders: true}, rls.ServerOptions()))
}

func pick(list []scenario, names ...string) []scenario {
	var out []scenario
	for _, s := range list {
		for _, n := range names {
			if s.name == n {
				out = append(out, s)
			}
		}
	}
	return out
}

// TestSluiceAgainstSluice runs scenarios against two sluice servers: with
// the same rules every call is identical; with key2's limit 20 against
// 21, every call differs in current_limit, the first 20 in
// limit_remaining, and the 21st (OVER_LIMIT against OK) in the code.
func TestSluiceAgainstSluice(t *testing.T) {
	list := pick(scenarios("t"), "key2 25 calls against 20/min", "key2+key3 15 calls, two descriptors", "empty descriptors", "invalid requests")
	if len(list) != 4 {
		t.Fatalf("picked %d scenarios, want 4", len(list))
	}
	noWait := func(bool) {}
	a := serve(t, 20)
	same := runAll(context.Background(), a, serve(t, 20), list, noWait)
	var out bytes.Buffer
	report(&out, same, "a", "b", false)
	if !strings.Contains(out.String(), "total: 48 calls, 48 identical, 0 different") {
		t.Errorf("same rules:\n%s", out.String())
	}

	other := runAll(context.Background(), serve(t, 20), serve(t, 21), list[:1], noWait)
	for i, c := range other[0].Calls {
		joined := strings.Join(c.Diffs, "\n")
		if !strings.Contains(joined, "current_limit") {
			t.Errorf("call %d: diffs %q, want current_limit", i+1, c.Diffs)
		}
		if rem := strings.Contains(joined, "limit_remaining"); rem != (i < 20) {
			t.Errorf("call %d: limit_remaining differs: %v, want %v", i+1, rem, !rem)
		}
		if code := strings.Contains(joined, "overall_code"); code != (i+1 == 21) {
			t.Errorf("call %d: overall_code differs: %v, want %v (only the 21st: OVER_LIMIT against OK)", i+1, code, !code)
		}
	}
}

func TestCompare(t *testing.T) {
	status1 := func(rem uint32, reset time.Duration) *rlsv3.RateLimitResponse {
		return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
			Code: rlsv3.RateLimitResponse_OK, LimitRemaining: rem, DurationUntilReset: durationpb.New(reset),
			CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 10, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE}}}}
	}
	withReset := func(r *rlsv3.RateLimitResponse, v string) *rlsv3.RateLimitResponse {
		r.ResponseHeadersToAdd = []*corev3.HeaderValue{{Key: "RateLimit-Reset", Value: v}}
		return r
	}
	for _, tt := range []struct {
		name string
		a, b answer
		want []string // the fields that differ
	}{
		{"equal", answer{resp: status1(3, 10*time.Second)}, answer{resp: status1(3, 10*time.Second)}, nil},
		{"reset within a second", answer{resp: status1(3, 10*time.Second)}, answer{resp: status1(3, 9100*time.Millisecond)}, nil},
		{"reset 2 s apart", answer{resp: status1(3, 10*time.Second)}, answer{resp: status1(3, 8*time.Second)}, []string{"statuses[0].duration_until_reset"}},
		{"remaining", answer{resp: status1(3, 0)}, answer{resp: status1(4, 0)}, []string{"statuses[0].limit_remaining"}},
		{"reset header within a second", answer{resp: withReset(status1(3, 0), "10")}, answer{resp: withReset(status1(3, 0), "9")}, nil},
		{"reset header apart", answer{resp: withReset(status1(3, 0), "10")}, answer{resp: withReset(status1(3, 0), "0")}, []string{"response_headers_to_add"}},
		{"error codes", answer{err: status.Error(codes.Unknown, "x")}, answer{err: status.Error(codes.InvalidArgument, "y")}, []string{"grpc code"}},
		{"same error code", answer{err: errors.New("x")}, answer{err: errors.New("y")}, nil},
		{"error against an answer", answer{err: status.Error(codes.Unknown, "x")}, answer{resp: status1(3, 0)}, []string{"grpc code"}},
	} {
		got := compare(tt.a, tt.b)
		var fields []string
		for _, d := range got {
			fields = append(fields, d[:strings.Index(d, ":")])
		}
		if strings.Join(fields, ",") != strings.Join(tt.want, ",") {
			t.Errorf("%s: compare = %q, want differences in %q", tt.name, got, tt.want)
		}
	}
}
