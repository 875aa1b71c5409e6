package rules

import "github.com/sluicehq/sluice/internal/doctree"

// The first step of reading outside input (see decode.go): JSON or YAML
// text becomes a tree of doctree.Node, which keeps each value's kind and
// line.

type (
	tnode = doctree.Node
	tkey  = doctree.Key
)

const (
	tnull   = doctree.Null
	tbool   = doctree.Bool
	tnumber = doctree.Number
	tstring = doctree.String
	tobject = doctree.Object
	tarray  = doctree.Array
)

func parseJSON(b []byte) (*tnode, error) { return doctree.ParseJSON(b) }
func parseYAML(b []byte) (*tnode, error) { return doctree.ParseYAML(b) }
