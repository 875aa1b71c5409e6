package plan

import (
	"strings"
	"testing"
)

// TestValidPlan: the one check of a plan name, which rules, the decision
// API and JWT plan claims share.
func TestValid(t *testing.T) {
	for _, tt := range []struct {
		p    string
		want bool
	}{
		{"free", true}, {"Pro-2.x_y", true}, {"9", true}, {strings.Repeat("a", MaxLen), true},
		{"", false}, {strings.Repeat("a", MaxLen+1), false}, {".free", false}, {"-a", false},
		{"fr ee", false}, {"fré", false}, {"a\xff", false}, {"a/b", false},
	} {
		if got := Valid(tt.p); got != tt.want {
			t.Errorf("Valid(%q) = %v, want %v", tt.p, got, tt.want)
		}
	}
}
