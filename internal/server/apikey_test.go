package server

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/rules"
)

// apiKeySet is a by: client rule of 2 an hour (a token bucket, so that the
// reserve API applies too) and one registered key.
func apiKeySet() *rules.Set {
	return &rules.Set{
		Rules: []rules.Rule{{ID: "per-client", Limit: 2, Window: seconds(time.Hour), By: rules.ByClient, Algorithm: algorithm.TokenBucket}},
		Clients: map[string]rules.Client{
			"api_key:k_live_42": {Plan: "free"},
		},
	}
}

// TestCheckUnregisteredAPIKeyIsNoCaller: through POST /ratelimit/check an
// api_key the client registry does not hold is no identity, as in the
// gateway, the middleware and the Envoy API. A client that sends a new key
// each call is its address: 2 of 8 calls pass a by: client rule of 2 an
// hour, and the answer names the address's bucket. A registered key keeps
// its own bucket.
func TestCheckUnregisteredAPIKeyIsNoCaller(t *testing.T) {
	forDecoders(t, testCheckUnregisteredAPIKeyIsNoCaller)
}

func testCheckUnregisteredAPIKeyIsNoCaller(t *testing.T, dec string) {
	s, clk := newTestServer(t, apiKeySet(), Config{JSONDecoder: dec})
	allowed := 0
	for i := range 8 {
		a, _ := check(t, s, clk, `{"api_key":"fresh-`+strconv.Itoa(i)+`","ip":"203.0.113.7"}`)
		if a.Allowed {
			allowed++
		}
		if a.Client == nil || *a.Client != "ip:203.0.113.7" {
			t.Errorf("call %d: client %s, want ip:203.0.113.7", i+1, deref(a.Client))
		}
	}
	if allowed != 2 {
		t.Errorf("calls with a new unregistered api_key each: %d of 8 allowed, want 2 (the address's bucket)", allowed)
	}
	if a, _ := check(t, s, clk, `{"ip":"203.0.113.7"}`); a.Allowed {
		t.Errorf("call from the same address without a key allowed, want denied")
	}
	// A registered key is a caller of its own.
	for i := range 3 {
		a, _ := check(t, s, clk, `{"api_key":"k_live_42","ip":"203.0.113.7"}`)
		if want := i < 2; a.Allowed != want || a.Client == nil || *a.Client != "api_key:k_live_42" {
			t.Errorf("call %d with the registered key: allowed %v client %s, want %v api_key:k_live_42", i+1, a.Allowed, deref(a.Client), want)
		}
	}
}

// TestReserveUnregisteredAPIKeyIsNoCaller: the reserve API alike.
func TestReserveUnregisteredAPIKeyIsNoCaller(t *testing.T) {
	forDecoders(t, testReserveUnregisteredAPIKeyIsNoCaller)
}

func testReserveUnregisteredAPIKeyIsNoCaller(t *testing.T, dec string) {
	s, _ := newTestServer(t, apiKeySet(), Config{JSONDecoder: dec})
	allowed := 0
	for i := range 8 {
		a := reserveOK(t, s, `{"api_key":"fresh-`+strconv.Itoa(i)+`","ip":"203.0.113.7","max_wait_ms":0}`)
		if a.Allowed {
			allowed++
		}
		if a.Client == nil || *a.Client != "ip:203.0.113.7" {
			t.Errorf("reservation %d: client %s, want ip:203.0.113.7", i+1, deref(a.Client))
		}
	}
	if allowed != 2 {
		t.Errorf("reservations with a new unregistered api_key each: %d of 8 allowed, want 2", allowed)
	}
}

// deref is *p, "null" for nil.
func deref(p *string) string {
	if p == nil {
		return "null"
	}
	return *p
}
