package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestCheckUnregisteredAPIKeyIsNoCaller: through `sluice serve`'s decision
// API, an api_key nobody registered is no caller (issue 27 §2): a client
// sending a new key each call against a by: client rule of 2 an hour gets
// 2 of 8, the address's bucket; a registered key keeps its own.
func TestCheckUnregisteredAPIKeyIsNoCaller(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	doc := "rules:\n  - {id: per-client, by: client, limit: 2, window: 1h}\nclients:\n  \"api_key:k_live_42\": {plan: free}\n"
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	in := serve(t, path)
	allowed := 0
	for i := range 8 {
		a, _ := in.check(t, map[string]any{"api_key": "fresh-" + strconv.Itoa(i), "ip": "203.0.113.7"})
		if a.Allowed {
			allowed++
		}
		if a.Client == nil || *a.Client != "ip:203.0.113.7" {
			t.Errorf("call %d: %+v, want the client ip:203.0.113.7", i+1, a)
		}
	}
	if allowed != 2 {
		t.Errorf("calls with a new unregistered api_key each: %d of 8 allowed, want 2", allowed)
	}
	for i := range 3 {
		a, _ := in.check(t, map[string]any{"api_key": "k_live_42", "ip": "203.0.113.7"})
		if a.Allowed != (i < 2) || a.Client == nil || *a.Client != "api_key:k_live_42" {
			t.Errorf("registered key, call %d: %+v, want allowed %v as api_key:k_live_42", i+1, a, i < 2)
		}
	}
}
