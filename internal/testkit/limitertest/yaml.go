package limitertest

import (
	"testing"

	"github.com/sluicehq/sluice/rules"
)

// CompileYAML returns the rules document doc parsed and compiled, and
// fails the test when it is refused.
func CompileYAML(t testing.TB, doc string) *rules.Index {
	t.Helper()
	set, err := rules.ParseYAML([]byte(doc))
	if err != nil {
		t.Fatalf("rules.ParseYAML: %v", err)
	}
	return Compile(t, set)
}
