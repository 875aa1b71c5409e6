// Package rulecheck holds the checks on rules that sluice's own commands
// and APIs run and a library user of package rules does not need: the
// linter behind `sluice rules lint` and the rules file's warnings, and the
// admin API's check of a client id in a URL.
//
// The checks read the rules model from the inside, so package rules
// implements them and sets the variables below in its init: every program
// that imports rules (each caller of these does) finds them set.
package rulecheck

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/internal/quote"
)

var (
	// Lint reads a rules file as rules.ParseYAML does (its error is
	// ParseYAML's) and returns what the set it holds probably does not
	// mean, in file order: a kind of caller on a plan that no rule limits,
	// a rule keyed by ip beside rules that limit signed-in callers by user
	// or key, a leaky_bucket rule written with burst: 0. The rules
	// package's lint.go tells each in full.
	Lint func(b []byte) ([]Finding, error)

	// ValidClientID checks a client id as used in rules.Set.Clients and
	// the admin API: "user:<id>", "api_key:<key>" or "ip:<address or
	// prefix>", as rules.Set.Validate checks the keys of Clients. The
	// error is a *rules.FieldError for the field "client".
	ValidClientID func(id string) error
)

// A Finding is something a valid rule set probably does not mean: a kind
// of caller no rule limits, a rule for anonymous traffic that also counts
// signed-in callers, a leaky bucket whose burst 0 means 1. Line is the
// rules file's line it is about (0 when it is about no one place); Rule is
// the id of the rule it is about, if one.
type Finding struct {
	Line    int
	Rule    string
	Message string
}

func (f Finding) String() string {
	var b strings.Builder
	if f.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", f.Line)
	}
	if f.Rule != "" {
		fmt.Fprintf(&b, "rule %s: ", quote.Short(f.Rule))
	}
	b.WriteString(f.Message)
	return b.String()
}
