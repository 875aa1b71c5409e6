package rules

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestOverlapAcrossPathCase: a call spelled "/API/orders" matches
// case-sensitive rules under "/API/*" and path_case insensitive rules on
// "/api/orders" at once; the overlap check finds that call.
func TestOverlapAcrossPathCase(t *testing.T) {
	var s Set
	for i := range 20 {
		s.Rules = append(s.Rules, Rule{ID: fmt.Sprintf("upper-%d", i), Match: Match{Endpoint: "* /API/*"}, Limit: 1, Window: Duration(time.Minute)})
	}
	for i := range 13 {
		s.Rules = append(s.Rules, Rule{ID: fmt.Sprintf("folded-%d", i), Match: Match{Endpoint: "GET /api/orders", PathCase: PathCaseInsensitive}, Limit: 1, Window: Duration(time.Minute)})
	}
	_, err := Compile(&s)
	if err == nil || !strings.Contains(err.Error(), "GET /API/orders") {
		t.Fatalf("Compile(20 rules on /API/* and 13 insensitive on /api/orders) = %v, want the call GET /API/orders named", err)
	}
	s.Rules = s.Rules[:32]
	ix, err := Compile(&s)
	if err != nil {
		t.Fatalf("Compile(32 rules) = %v", err)
	}
	if got := len(ix.Match("", "HEAD", "/API/Orders/", nil)); got != 32 {
		t.Errorf("HEAD /API/Orders/ matches %d rules, want 32", got)
	}
}
