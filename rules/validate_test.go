package rules

import (
	"strings"
	"testing"
)

// TestValidPlan: the one check of a plan name, which rules, the decision
// API and JWT plan claims share.
func TestValidPlan(t *testing.T) {
	for _, tt := range []struct {
		p    string
		want bool
	}{
		{"free", true}, {"Pro-2.x_y", true}, {"9", true}, {strings.Repeat("a", MaxPlan), true},
		{"", false}, {strings.Repeat("a", MaxPlan+1), false}, {".free", false}, {"-a", false},
		{"fr ee", false}, {"fré", false}, {"a\xff", false}, {"a/b", false},
	} {
		if got := ValidPlan(tt.p); got != tt.want {
			t.Errorf("ValidPlan(%q) = %v, want %v", tt.p, got, tt.want)
		}
	}
}
