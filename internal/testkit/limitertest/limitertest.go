// Package limitertest builds what tests decide with: a limiter over a real
// embedded store, with a rule set in force.
package limitertest

import (
	"testing"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/memory"
)

// New compiles set and returns a limiter with it in force over an embedded
// store made with cfg, and that store (closed when the test ends). It fails
// the test when the store or the rules are refused.
func New(t testing.TB, set *rules.Set, cfg memory.Config) (*limiter.Limiter, *memory.Store) {
	t.Helper()
	st := Store(t, cfg)
	return Over(t, st, set), st
}

// Over compiles set and returns a limiter with it in force over st. It
// fails the test when the rules are refused.
func Over(t testing.TB, st limiter.Store, set *rules.Set) *limiter.Limiter {
	t.Helper()
	l := limiter.New(st, limiter.Config{})
	l.SetRules(Compile(t, set))
	return l
}

// Store returns an embedded store made with cfg, closed when the test
// ends. It fails the test when cfg is refused.
func Store(t testing.TB, cfg memory.Config) *memory.Store {
	t.Helper()
	st, err := memory.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// Compile returns set compiled, and fails the test when it is refused.
func Compile(t testing.TB, set *rules.Set) *rules.Index {
	t.Helper()
	ix, err := rules.Compile(set)
	if err != nil {
		t.Fatalf("rules.Compile: %v", err)
	}
	return ix
}
