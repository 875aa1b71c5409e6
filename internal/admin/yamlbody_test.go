package admin

import (
	"net/http"
	"strings"
	"testing"
)

// TestApplyYAMLBodyHint: a rules file sent as it is to POST /apply (YAML
// where JSON is wanted) is a 400 that says so and names the command that
// takes YAML, not only "invalid JSON at offset 1".
func TestApplyYAMLBodyHint(t *testing.T) {
	e := newEnv(t, Config{})
	for _, body := range []string{
		"rules:\n  - id: a\n    limit: 10\n    window: 1m\n",
		"# my rules\nrules: []\n",
		"---\nrules: []\n",
	} {
		r := e.do("POST", "/apply", body, "Content-Type", "application/json")
		msg, _ := r.json(t)["message"].(string)
		if r.status != http.StatusBadRequest || !strings.Contains(msg, "YAML") || !strings.Contains(msg, "sluice rules apply -f") {
			t.Errorf("POST /apply %q = %d %q, want 400 saying the body looks like YAML and naming sluice rules apply -f", body, r.status, msg)
		}
	}
	// JSON that is only wrong gets no such hint.
	r := e.do("POST", "/apply", `{"rules": [}`, "Content-Type", "application/json")
	if msg, _ := r.json(t)["message"].(string); r.status != http.StatusBadRequest || strings.Contains(msg, "YAML") {
		t.Errorf("POST /apply of broken JSON = %d %q, want 400 without a YAML hint", r.status, msg)
	}
}
