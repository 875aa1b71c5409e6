package rls_test

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/rules"
)

// Descriptors that disagree and together name more buckets than one store
// operation takes are still decided — never InvalidArgument, which Envoy
// turns into "allow".
func TestDescriptorsBeyondMaxRulesPerCall(t *testing.T) {
	set := &rules.Set{}
	for i := range 20 {
		for _, p := range []string{"a", "b"} {
			set.Rules = append(set.Rules, rules.Rule{ID: fmt.Sprintf("%s-%d", p, i), Match: rules.Match{Endpoint: "* /" + p},
				By: rules.ByUser, Limit: 2, Window: minute})
		}
	}
	e := newEnv(t, set)
	req := request("d", desc("user", "alice", "method", "GET", "path", "/a"), desc("user", "alice", "method", "GET", "path", "/b"))
	for i, want := range []any{ok, ok, over, over} {
		resp := e.call(t, req)
		if resp.OverallCode != want {
			t.Fatalf("call %d = %v, want %v", i+1, resp.OverallCode, want)
		}
		for j, st := range resp.Statuses {
			if st.Code != want {
				t.Errorf("call %d: status %d = %v, want %v", i+1, j, st.Code, want)
			}
		}
	}
}
