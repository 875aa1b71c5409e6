package admin

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// A change after which one call would match more rules than a decision
// can apply is refused with 400, naming the rules, the limit and the fix,
// and changes nothing: through PUT /rules/{id} and through /apply.
func TestOverlappingRulesRefused(t *testing.T) {
	e := newEnv(t, Config{})
	for i := range 32 {
		e.must(e.do("PUT", fmt.Sprintf("/rules/all-%02d", i), `{"limit": 100, "window": "1m"}`), 201)
	}
	rev := e.revision()
	fileBefore, _ := os.ReadFile(e.path)
	wants := []string{"matches 33 enabled rules, more than the 32 one decision applies", `"all-00"`, `"all-31"`, "narrower match"}
	refused := func(what string, r resp) {
		t.Helper()
		if r.status != 400 {
			t.Fatalf("%s: status %d (%s), want 400", what, r.status, r.body)
		}
		m := r.json(t)
		msg, _ := m["message"].(string)
		if m["error"] != "invalid_request" || !strings.HasPrefix(msg, "rules: a call such as ") {
			t.Errorf("%s: %s, want invalid_request on the field rules", what, r.body)
		}
		for _, w := range wants {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: message %q, want it to contain %q", what, msg, w)
			}
		}
		if e.revision() != rev {
			t.Errorf("%s: revision %d, want %d (nothing stored)", what, e.revision(), rev)
		}
		if after, _ := os.ReadFile(e.path); string(after) != string(fileBefore) {
			t.Errorf("%s: the rules file changed", what)
		}
	}

	refused("PUT of a 33rd catch-all rule", e.do("PUT", "/rules/all-32", `{"limit": 100, "window": "1m"}`))

	var b strings.Builder
	b.WriteString(`{"rules": [`)
	for i := range 33 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"id": "all-%02d", "limit": 100, "window": "1m"}`, i)
	}
	b.WriteString("]}")
	refused("apply of 33 catch-all rules", e.do("POST", "/apply", b.String()))
	refused("dry run of 33 catch-all rules", e.do("POST", "/apply?dry_run=true", b.String()))

	// Disabled, the 33rd rule is accepted; narrowing one of the 32 makes
	// room for it.
	e.must(e.do("PUT", "/rules/all-32", `{"limit": 100, "window": "1m", "enabled": false}`), 201)
	e.must(e.do("PUT", "/rules/all-00", `{"limit": 100, "window": "1m", "match": {"endpoint": "POST /login"}}`), 200)
	e.must(e.do("PUT", "/rules/all-32", `{"limit": 100, "window": "1m", "match": {"endpoint": "GET /api/*"}}`), 200)
}
