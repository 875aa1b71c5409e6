package rulestore

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicehq/sluice/internal/testkit/xdstest"
	"github.com/sluicehq/sluice/rules"
)

// egConfig is a RateLimitConfig shaped as Envoy Gateway generates them
// (internal/xds/translator, its ratelimit-config test outputs): named and
// domained after the listener, a descriptor per route, one per rule's
// match below it, and the limit on the last, per client IP when distinct.
func egConfig(listener, route string, n uint32, distinct bool) *rlsconfv3.RateLimitConfig {
	leaf := &rlsconfv3.RateLimitDescriptor{Key: "rule-0-match-0", Value: "rule-0-match-0",
		RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: n}}
	if distinct {
		leaf.RateLimit = nil
		leaf.Descriptors = []*rlsconfv3.RateLimitDescriptor{{Key: "remote_address",
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: n}}}
	}
	return &rlsconfv3.RateLimitConfig{Name: listener, Domain: listener, Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: route, Value: route, Descriptors: []*rlsconfv3.RateLimitDescriptor{leaf}},
	}}
}

const egRoute = "httproute/default/backend/rule/0/match/0/www_example_com"

// TestEnvoyXDS: the RateLimitConfig resources of a go-control-plane xDS
// server are in force, ACKed; a change is in force; a change that does
// not load is NACKed with the reason and the last good stays; a server
// restart keeps the last good in force until the restarted server's
// configuration comes.
func TestEnvoyXDS(t *testing.T) {
	srv := xdstest.Start(t, "127.0.0.1:0")
	srv.Set(t, "envoy-ratelimit", 1, egConfig("default/eg/https", egRoute, 3, false), egConfig("default/eg/http", egRoute, 7, true))
	var log syncLog
	x, err := OpenEnvoyXDS(t.Context(), EnvoyXDSConfig{ServerURL: srv.Addr, NodeID: "envoy-ratelimit", RetryInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	want := func(what string, l map[string]int64) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			got := limits(x.Current())
			same := len(got) == len(l)
			for k, v := range l {
				same = same && got[k] == v
			}
			if same {
				return
			}
		}
		t.Fatalf("%s: limits %v, want %v", what, limits(x.Current()), l)
	}
	want("first configuration", map[string]int64{"default/eg/https": 3, "default/eg/http": 7})
	byDomain := map[string]rules.Rule{}
	for _, r := range x.Current().Rules() {
		byDomain[r.Match.Domain] = r.Rule
	}
	if https, http := byDomain["default/eg/https"], byDomain["default/eg/http"]; len(byDomain) != 2 ||
		len(https.Match.Entries) != 2 || https.By == "entry:remote_address" || http.By != "entry:remote_address" {
		t.Errorf("rules %+v, want the route and match entries, http's keyed by remote_address", byDomain)
	}

	srv.Set(t, "envoy-ratelimit", 2, egConfig("default/eg/https", egRoute, 4, false))
	want("a change", map[string]int64{"default/eg/https": 4})

	bad := egConfig("default/eg/https", egRoute, 5, false)
	bad.Descriptors[0].Descriptors[0].RateLimit.Unit = rlsconfv3.RateLimitUnit_UNKNOWN
	srv.Set(t, "envoy-ratelimit", 3, bad)
	for deadline := time.Now().Add(10 * time.Second); len(srv.Nacked()) == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	// The server sends the refused version again after each NACK; each is
	// refused, a retry interval apart.
	if n := srv.Nacked(); len(n) == 0 || !strings.Contains(n[0], `rate_limit.unit: want one of second, minute, hour, day, week, month, year (any letter case), got "UNKNOWN"`) {
		t.Fatalf("NACKs %q, want the unit named", n)
	}
	want("after a NACK", map[string]int64{"default/eg/https": 4})
	if st := x.Status(); st.Error == "" {
		t.Errorf("Status after a NACK = %+v, want the error", st)
	}

	// The server stops: the last good stays, the problem shows.
	addr := srv.Addr
	srv.Stop()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(x.Status().Error, "xDS server") && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if st := x.Status(); !strings.Contains(st.Error, "the last good configuration stays in force") {
		t.Errorf("Status with the server down = %+v", st)
	}
	want("server down", map[string]int64{"default/eg/https": 4})

	// It comes back on the same address, with a fresh cache.
	srv2 := xdstest.Start(t, addr)
	srv2.Set(t, "envoy-ratelimit", 1, egConfig("default/eg/https", egRoute, 9, false))
	want("server restarted", map[string]int64{"default/eg/https": 9})
	if st := x.Status(); st.Error != "" {
		t.Errorf("Status after the restart = %+v, want no error", st)
	}
}

// TestEnvoyXDSStart: without ForceStart, OpenEnvoyXDS waits for a
// configuration that loads; with it, it starts with none.
func TestEnvoyXDSStart(t *testing.T) {
	srv := xdstest.Start(t, "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, err := OpenEnvoyXDS(ctx, EnvoyXDSConfig{ServerURL: srv.Addr, NodeID: "n", RetryInterval: 20 * time.Millisecond}); err == nil ||
		!strings.Contains(err.Error(), "no configuration received") {
		t.Errorf("OpenEnvoyXDS with no snapshot = %v, want it to wait and give up with ctx", err)
	}
	x, err := OpenEnvoyXDS(t.Context(), EnvoyXDSConfig{ServerURL: srv.Addr, NodeID: "n", ForceStart: true})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if n := len(x.Current().Rules()); n != 0 {
		t.Errorf("ForceStart: %d rules, want none", n)
	}
	srv.Set(t, "n", 1, egConfig("d", "r", 2, false))
	for deadline := time.Now().Add(10 * time.Second); len(x.Current().Rules()) == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if l := limits(x.Current()); l["d"] != 2 {
		t.Errorf("limits %v, want d 2", l)
	}
}

// TestXDSResourceOrder: the rules of an xDS push do not depend on the
// order the server lists its resources in (go-control-plane's snapshot
// keeps them in a map: each push may list them in another order). The
// files are taken in the order of the resources' names, as a runtime
// directory's are in the order of the files' names, so the same
// configuration is the same rules.
func TestXDSResourceOrder(t *testing.T) {
	a, b := egConfig("default/eg/http", egRoute, 7, true), egConfig("default/eg/https", egRoute, 3, false)
	names := func(confs ...*rlsconfv3.RateLimitConfig) []string {
		t.Helper()
		resp := &discoveryv3.DiscoveryResponse{}
		for _, c := range confs {
			res, err := anypb.New(c)
			if err != nil {
				t.Fatal(err)
			}
			resp.Resources = append(resp.Resources, res)
		}
		files, err := configFiles(resp)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range files {
			out = append(out, f.Name)
		}
		return out
	}
	ab, ba := names(a, b), names(b, a)
	if !slices.Equal(ab, ba) {
		t.Errorf("files of resources (http, https) = %v, of (https, http) = %v; want the same order", ab, ba)
	}
}
