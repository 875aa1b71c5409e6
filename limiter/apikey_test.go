package limiter_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/identity"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
)

// registered returns a client registry holding the API keys keys.
func registered(keys ...string) map[string]rules.Client {
	m := make(map[string]rules.Client, len(keys))
	for _, k := range keys {
		m[string(identity.AppendAPIKey(nil, k))] = rules.Client{Plan: "keyed"}
	}
	return m
}

// TestUnregisteredAPIKeyIsNoCaller: the limiter, under every entry point
// (decision API, reserve API, Envoy API, gateway, middleware), takes an
// API key as the caller only when the rules' client registry holds it. A
// client that invents a key each call is keyed by its other identities —
// here its address, 2 of 8 against a by: client rule of 2 — never a fresh
// bucket per key; a rule keyed by the API key alone does not apply to it;
// Check, CheckMany and Reserve agree, and AppendClientID names the bucket
// the limiter used.
func TestUnregisteredAPIKeyIsNoCaller(t *testing.T) {
	set := &rules.Set{Rules: []rules.Rule{
		rule("per-client", 2, time.Hour, func(r *rules.Rule) { r.By = rules.ByClient }),
		rule("per-key", 1, time.Hour, func(r *rules.Rule) { r.By = rules.ByAPIKey }),
		rule("per-key-ep", 1, time.Hour, func(r *rules.Rule) { r.By = "api_key+endpoint" }),
	}, Clients: registered("k_live_42")}
	ctx := context.Background()
	for _, entry := range []string{"Check", "CheckMany", "Reserve"} {
		t.Run(entry, func(t *testing.T) {
			l, _ := newLimiter(t, set)
			decide := func(req limiter.Request) limiter.Decision {
				t.Helper()
				var d limiter.Decision
				var err error
				switch entry {
				case "Check":
					d, err = l.Check(ctx, &req)
				case "CheckMany":
					ds := make([]limiter.Decision, 1)
					err = l.CheckMany(ctx, []limiter.Request{req}, ds)
					d = ds[0]
				case "Reserve":
					d, _, err = l.Reserve(ctx, &req, 0)
				}
				if err != nil {
					t.Fatalf("%s(%+v): %v", entry, req, err)
				}
				return d
			}
			allowed := 0
			for i := range 8 {
				req := limiter.Request{APIKey: "fresh-" + strconv.Itoa(i), IP: "203.0.113.7", Method: "GET", Path: "/a"}
				d := decide(req)
				if d.Allowed {
					allowed++
				}
				if d.Matched != 1 || d.RuleID() != "per-client" || d.KeyedBy != rules.ByIP {
					t.Errorf("call %d: matched %d, rule %q keyed by %q; want 1, per-client, ip", i+1, d.Matched, d.RuleID(), d.KeyedBy)
				}
				if got := string(l.AppendClientID(nil, d.KeyedBy, &req)); got != "ip:203.0.113.7" {
					t.Errorf("call %d: AppendClientID = %q, want ip:203.0.113.7", i+1, got)
				}
				if got := string(l.AppendClientID(nil, rules.ByClient, &req)); got != "ip:203.0.113.7" {
					t.Errorf("call %d: AppendClientID(client) = %q, want ip:203.0.113.7", i+1, got)
				}
			}
			if allowed != 2 {
				t.Errorf("calls with a new unregistered API key each: %d of 8 allowed, want 2 (the address's bucket)", allowed)
			}
			// The registered key is a caller: all three rules apply.
			d := decide(limiter.Request{APIKey: "k_live_42", IP: "203.0.113.7", Method: "GET", Path: "/a"})
			if !d.Allowed || d.Matched != 3 || d.KeyedBy != rules.ByAPIKey {
				t.Errorf("registered key: allowed %v matched %d keyed by %q, want true 3 api_key", d.Allowed, d.Matched, d.KeyedBy)
			}
		})
	}
}
