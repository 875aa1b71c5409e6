package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestIPv6PrefixOutOfRange: --ipv6-prefix outside 1..128 is refused,
// naming the flag, by both commands that key callers (issue 27 §6: 200 and
// -3 were accepted and /64 used).
func TestIPv6PrefixOutOfRange(t *testing.T) {
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	for _, cmd := range [][]string{
		{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0"},
		{"gateway", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1"},
	} {
		for _, v := range []string{"200", "-3", "0", "129"} {
			args := append(append([]string{}, cmd...), "--rules", rules, "--ipv6-prefix", v)
			code, _, stderr := sluice(t, "", args...)
			if want := "--ipv6-prefix " + v + ": want a prefix length from 1 to 128"; code != 1 || !strings.Contains(stderr, want) {
				t.Errorf("sluice %v = %d, %q; want 1 and an error containing %q", args, code, stderr, want)
			}
		}
	}
}
