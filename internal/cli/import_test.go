package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/rules"
)

// TestRulesImport: `sluice rules import DIR` reads every *.yaml and *.yml
// file of an envoyproxy/ratelimit runtime directory (not hidden ones, not
// other files) and writes a rules file that sluice loads; a file it cannot
// convert is an error naming the file and line, and nothing is written.
func TestRulesImport(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: mongo\ndescriptors:\n  - key: database\n    value: users\n    rate_limit: {unit: second, requests_per_unit: 500}\n")
	write("b.yml", "domain: msg\ndescriptors:\n  - key: to_number\n    rate_limit: {unit: day, requests_per_unit: 100}\n")
	write(".hidden.yaml", "not: [valid")
	write("notes.txt", "not: [valid")

	out := filepath.Join(t.TempDir(), "rules.yaml")
	code, stdout, stderr := sluice(t, "", "rules", "import", dir, "-o", out)
	if code != 0 {
		t.Fatalf("rules import: exit %d, %s%s", code, stdout, stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.ParseYAML(b)
	if err != nil {
		t.Fatalf("the imported rules file does not load: %v\n%s", err, b)
	}
	var got []string
	for _, r := range set.Rules {
		got = append(got, r.ID+" "+r.Match.Domain+" "+string(r.By))
	}
	if want := "mongo.1 mongo global|msg.1 msg entry:to_number"; strings.Join(got, "|") != want {
		t.Errorf("imported rules %q, want %q", strings.Join(got, "|"), want)
	}

	code, stdout, stderr = sluice(t, "", "rules", "import", dir, "--algorithm", "sliding_window")
	if code != 0 || strings.Count(stdout, "algorithm: sliding_window") != 2 {
		t.Errorf("rules import --algorithm sliding_window: exit %d, %s%s; want both rules sliding_window", code, stdout, stderr)
	}
	code, _, stderr = sluice(t, "", "rules", "import", dir, "--algorithm", "gcra")
	if code == 0 || !strings.Contains(stderr, "--algorithm") {
		t.Errorf("rules import --algorithm gcra: exit %d, %s; want an error naming --algorithm", code, stderr)
	}

	write("c.yaml", "domain: x\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n  - key: k\n    quota_mode: true\n")
	code, stdout, stderr = sluice(t, "", "rules", "import", dir)
	if code == 0 || !strings.Contains(stderr, `c.yaml: line 5: k: a descriptor of this level already has key and value "k"`) || stdout != "" {
		t.Errorf("rules import of a duplicate descriptor: exit %d, stdout %q, stderr %q; want an error naming c.yaml line 5 and no output", code, stdout, stderr)
	}
	// MERGE_DOMAIN_CONFIG's --merge-domains.
	write("c.yaml", "domain: msg\ndescriptors:\n  - key: k\n    quota_mode: true\n    rate_limit: {unit: second, requests_per_unit: 5}\n")
	if code, _, stderr = sluice(t, "", "rules", "import", dir); code == 0 || !strings.Contains(stderr, "MERGE_DOMAIN_CONFIG") {
		t.Errorf("rules import of two files of one domain: exit %d, %s", code, stderr)
	}
	code, stdout, stderr = sluice(t, "", "rules", "import", "--merge-domains", dir)
	if code != 0 || !strings.Contains(stdout, "id: msg.2") || !strings.Contains(stdout, "quota: true") {
		t.Errorf("rules import --merge-domains: exit %d, %s%s; want msg.2, a quota rule", code, stdout, stderr)
	}
	// --charge-after-response: the selected descriptors' rules are charges.
	code, stdout, stderr = sluice(t, "", "rules", "import", "--merge-domains", "--charge-after-response", "msg:k,nowhere", dir)
	if code != 0 || strings.Count(stdout, "charge: after_response") != 1 || !strings.Contains(stderr, `note: charge after response: "nowhere" selects no descriptor`) {
		t.Errorf("rules import --charge-after-response: exit %d, %s%s; want one charged rule and a note", code, stdout, stderr)
	}
	if code, _, stderr = sluice(t, "", "rules", "import", "--charge-after-response", ":k", dir); code == 0 || !strings.Contains(stderr, "--charge-after-response \":k\": want domain") {
		t.Errorf("rules import --charge-after-response :k: exit %d, %s; want the selector refused", code, stderr)
	}
}
