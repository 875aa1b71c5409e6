package listen

import "testing"

// TestTokensOfMatch: tokens made from checked values match as parsed ones
// do, and name the actor of the token that matched.
func TestTokensOfMatch(t *testing.T) {
	toks := TokensOf("--admin-token", []Token{{Value: "alice:s1", Name: "alice"}, {Value: "plain"}})
	for _, tt := range []struct {
		auth, name string
		ok         bool
	}{
		{"Bearer alice:s1", "alice", true},
		{"bearer  plain ", "", true},
		{"Bearer s1", "", false},
		{"Basic plain", "", false},
		{"Bearer", "", false},
	} {
		name, ok := toks.Match(tt.auth)
		if name != tt.name || ok != tt.ok || toks.Valid(tt.auth) != tt.ok {
			t.Errorf("Match(%q) = %q, %v; want %q, %v", tt.auth, name, ok, tt.name, tt.ok)
		}
	}
	if !toks.Set() || (Tokens{}).Set() {
		t.Errorf("Set: %v for two tokens, %v for none; want true, false", toks.Set(), (Tokens{}).Set())
	}
}
