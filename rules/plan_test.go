package rules

import "testing"

func TestPlan(t *testing.T) {
	off := false
	ix, err := Compile(&Set{
		DefaultPlan: "free",
		Clients:     map[string]Client{"user:bob": {Plan: "partner"}},
		Rules: []Rule{
			{ID: "free", Match: Match{Plan: "free"}, Limit: 1, Window: Duration(60e9)},
			{ID: "pro", Match: Match{Plan: "pro", Domain: "edge"}, Limit: 1, Window: Duration(60e9)},
			{ID: "gold", Match: Match{Plan: "gold"}, Limit: 1, Window: Duration(60e9), Enabled: &off},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		requested, user string
		want            string
	}{
		{"", "", "free"},
		{"free", "", "free"},
		{"pro", "", "pro"},         // named by a rule of a domain: known everywhere
		{"gold", "", "gold"},       // named by a disabled rule: still a plan
		{"partner", "", "partner"}, // named by the client registry only
		{"zzz", "", "free"},
		{"FREE", "", "free"},
		{"free.", "", "free"},
		{"zzz", "user:bob", "partner"}, // as if no plan was given: the registry
		{"pro", "user:bob", "pro"},
	}
	for _, tt := range tests {
		for _, v := range []*Index{ix, ix.Domain("edge")} {
			if got := v.Plan(tt.requested, tt.user, "", ""); got != tt.want {
				t.Errorf("Plan(%q, %q) = %q, want %q", tt.requested, tt.user, got, tt.want)
			}
		}
	}
	var empty *Index
	if got := empty.Plan("zzz", "", "", ""); got != "" {
		t.Errorf("nil Index: Plan(zzz) = %q, want \"\"", got)
	}
	if n := testing.AllocsPerRun(100, func() { ix.Plan("zzz", "user:bob", "", "") }); n != 0 {
		t.Errorf("Plan allocates %v times, want 0", n)
	}
}
