package rls_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/console"
	"github.com/sluicehq/sluice/internal/rls"
	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/memory"
)

// TestDeniedFeedsTopList: the Envoy API's denials feed the console's top
// list as the check API's do — each denied descriptor once, with the
// client its rule's bucket is keyed by, an API key by its fingerprint,
// never in clear — and an allowed one never reaches the hook. Both ways a
// request is decided count: one descriptor, and several decided each on
// its own.
func TestDeniedFeedsTopList(t *testing.T) {
	const key = "k_live_42"
	set := &rules.Set{
		Rules: []rules.Rule{
			{ID: "per-key", Limit: 1, Window: rules.Duration(time.Hour), By: rules.ByAPIKey},
			{ID: "per-user", Limit: 1, Window: rules.Duration(time.Hour), By: rules.ByUser,
				Match: rules.Match{Entries: []rules.Entry{{Key: "user"}, {Key: "tier", Value: "free"}}}},
		},
		Clients: map[string]rules.Client{"api_key:" + key: {Plan: "free"}},
	}
	hitters := console.NewHitters(0, nil)
	var told atomic.Int64
	e := newEnvStore(t, set, "memory", limitertest.Store(t, memory.DefaultConfig()), func(c *rls.Config) {
		feed := console.NewFeed(hitters, limiter.Config{})
		c.OnDenied = func(lim *limiter.Limiter, d *limiter.Decision, req *limiter.Request) {
			told.Add(1)
			feed.Denied(lim, d, req)
		}
	})

	byKey := request("edge", desc("api_key", key, "method", "GET", "path", "/api/orders"))
	for i, want := range []any{ok, over, over} {
		if got := e.call(t, byKey).OverallCode; got != want {
			t.Fatalf("call %d with the key = %v, want %v", i+1, got, want)
		}
	}
	// Two descriptors on their own entries, decided each: bob's second
	// request is denied once, by per-user.
	byUser := request("edge", desc("user", "bob", "tier", "free"), desc("user", "bob", "region", "eu"))
	for i, want := range []any{ok, over} {
		if got := e.call(t, byUser).OverallCode; got != want {
			t.Fatalf("call %d as bob = %v, want %v", i+1, got, want)
		}
	}
	if n := told.Load(); n != 3 {
		t.Errorf("OnDenied told %d times, want 3 (the denials only)", n)
	}

	sum := sha256.Sum256([]byte(key))
	wantKey := "api_key:#" + hex.EncodeToString(sum[:4])
	tops, _ := hitters.Top(10)
	got := map[string]console.Hitter{}
	for _, top := range tops {
		for _, c := range top.Callers {
			got[top.Rule+" "+c.Shown] = c
			if strings.Contains(c.Shown, key) {
				t.Errorf("top list shows %q: the API key in clear", c.Shown)
			}
		}
	}
	if c, found := got["per-key "+wantKey]; !found || c.Count != 2 || c.Client != "api_key:"+key {
		t.Errorf("top list %v: want per-key's caller %s denied 2 times (bucket api_key:%s)", tops, wantKey, key)
	}
	if c, found := got["per-user user:bob"]; !found || c.Count != 1 {
		t.Errorf("top list %v: want per-user's caller user:bob denied once", tops)
	}
}

// TestDeniedNamesDomainBucket: a rule of one domain keyed by a descriptor
// entry lists its bucket by the entry's value in the top list, as the
// domain's rules name it.
func TestDeniedNamesDomainBucket(t *testing.T) {
	set := &rules.Set{Rules: []rules.Rule{
		{ID: "checkout", Limit: 1, Window: rules.Duration(time.Hour), By: "entry:generic_key",
			Match: rules.Match{Domain: "edge", Entries: []rules.Entry{{Key: "generic_key"}}}},
	}}
	hitters := console.NewHitters(0, nil)
	feed := console.NewFeed(hitters, limiter.Config{})
	e := newEnvStore(t, set, "memory", limitertest.Store(t, memory.DefaultConfig()), func(c *rls.Config) {
		c.OnDenied = feed.Denied
	})
	call := request("edge", desc("generic_key", "checkout"))
	for i, want := range []any{ok, over, over} {
		if got := e.call(t, call).OverallCode; got != want {
			t.Fatalf("call %d = %v, want %v", i+1, got, want)
		}
	}
	tops, _ := hitters.Top(10)
	if len(tops) != 1 || len(tops[0].Callers) != 1 || tops[0].Callers[0].Shown != "entry:generic_key=checkout" || tops[0].Callers[0].Count != 2 {
		t.Fatalf("top list %+v, want checkout: entry:generic_key=checkout denied 2 times", tops)
	}
}
