package cli

import (
	"strings"
	"testing"
)

// TestRulesLint: sluice rules lint prints each finding with its file and
// line and exits 1; a set without findings exits 0; a file that does not
// load is an error (issue 31 §6).
func TestRulesLint(t *testing.T) {
	s := &testSluice{dir: t.TempDir()}
	bad := s.file(t, "lint.yaml", `default_plan: free
rules:
  - {id: free-per-user, match: {plan: free}, by: user, limit: 100, window: 1m}
  - {id: anon, by: ip, limit: 10, window: 1m}
  - {id: pace, limit: 10, window: 1s, algorithm: leaky_bucket, burst: 0}
`)
	code, out, errOut := sluice(t, "", "rules", "lint", bad)
	for _, want := range []string{
		`lint.yaml: line 4: rule "anon": keyed by ip, it also counts the signed-in callers and API keys that "free-per-user" limit`,
		`lint.yaml: line 5: rule "pace": burst: 0 on a leaky_bucket is the default burst`,
		"2 finding(s)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout =\n%s\nwant it to contain %q", out, want)
		}
	}
	if code != 1 || errOut != "" {
		t.Errorf("exit %d, stderr %q; want 1 and nothing on stderr", code, errOut)
	}
	code, out, _ = sluice(t, "default_plan: free\nrules:\n  - {id: c, by: client, limit: 1, window: 1s}\n", "rules", "lint", "-")
	if code != 0 || out != "standard input: no findings\n" {
		t.Errorf("a set without findings: exit %d, stdout %q; want 0, no findings", code, out)
	}
	code, _, errOut = sluice(t, "", "rules", "lint", "-")
	if code != 1 || !strings.Contains(errOut, `no "rules:" list`) {
		t.Errorf("an empty file: exit %d, stderr %q; want 1 and the reason", code, errOut)
	}
}
