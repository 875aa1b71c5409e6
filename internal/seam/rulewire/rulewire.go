// Package rulewire reads and writes the forms of rules that only sluice's
// service handles: the admin API's JSON bodies, decoded strictly (every
// error names the field's full path, what was wanted and what was found),
// the rows of the PostgreSQL store, and a rules file rewritten so that
// what an operator wrote stays where it was. A program that embeds sluice
// reads rules with rules.ParseYAML or encoding/json and Validate.
//
// The decoder and the encoder work on package rules' own document tree,
// so rules implements them and sets the variables below in its init:
// every program that imports rules (each caller of these does) finds them
// set. Their arguments are typed any only because this package cannot
// name the rules types; a wrong type panics.
package rulewire

var (
	// DecodeRuleJSON decodes one rule from JSON into *r, a *rules.Rule,
	// strictly (unknown or duplicate fields, wrong types and trailing data
	// are errors), and validates it. Errors about a field are
	// *rules.FieldError.
	DecodeRuleJSON func(b []byte, r any) error

	// DecodeSetJSON decodes a whole set from JSON into *s, a *rules.Set,
	// strictly like DecodeRuleJSON, and validates it.
	DecodeSetJSON func(b []byte, s any) error

	// EncodeYAMLOnto renders s, a *rules.Set, as a rules file made from
	// prev, the rules file it replaces: the order of the top-level keys,
	// every comment, the text of each rule and client that did not change
	// (a changed one keeps its place and its comments), rules in the order
	// of s (a new one at the end), new clients after the others. What it
	// returns reads back (rules.ParseYAML) to a set equal to s; when prev
	// is not a rules document whose layout can be kept (not YAML, not a
	// mapping) it is an error and the caller writes rules.EncodeYAML's.
	EncodeYAMLOnto func(prev []byte, s any) ([]byte, error)
)
