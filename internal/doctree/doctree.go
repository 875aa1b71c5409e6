// Package doctree is the first step of reading a rules file or an
// envoyproxy/ratelimit configuration: JSON or YAML text becomes a tree of
// Node, which keeps each value's kind, line and (YAML) text as written.
// It is shared by package rules and internal/envoyconf.
package doctree

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/quote"
)

// Kind is a Node's JSON or YAML kind of value.
type Kind uint8

const (
	Null Kind = iota
	Bool
	Number
	String
	Object
	Array
)

// Node is one value of a parsed JSON or YAML document.
type Node struct {
	Kind Kind
	Line int    // 1-based, YAML only
	Text string // string value; number or bool literal
	// Raw is a YAML scalar's text as written and Plain whether it was
	// written without quotes or a block style (envoyproxy/ratelimit's
	// YAML 1.1 reading: a plain yes is a boolean, a number in a string
	// field is its text).
	Raw   string
	Plain bool
	Keys  []Key // object members, in order
	Items []*Node
}

// Key is one member of an object Node.
type Key struct {
	Name string
	Line int
	Val  *Node
}

// Describe renders the value for "got ..." in an error message.
func (n *Node) Describe() string {
	switch n.Kind {
	case Null:
		return "null"
	case Bool, Number:
		if len(n.Text) > 40 {
			return n.Text[:40] + "…"
		}
		return n.Text
	case String:
		return quote.Short(n.Text)
	case Object:
		return "an object"
	}
	return "an array"
}

// LineOf returns the line of the deepest node on path that exists.
func (n *Node) LineOf(path []string) int {
	line := n.Line
	for _, p := range path {
		var next *Node
		switch n.Kind {
		case Object:
			for _, k := range n.Keys {
				if k.Name == p {
					line, next = k.Line, k.Val
					break
				}
			}
		case Array:
			if i, err := strconv.Atoi(p); err == nil && i >= 0 && i < len(n.Items) {
				next = n.Items[i]
				line = next.Line
			}
		}
		if next == nil {
			break
		}
		n = next
	}
	return line
}

// Get returns the value of n's first member name, nil when it has none.
func (n *Node) Get(name string) *Node {
	for _, k := range n.Keys {
		if k.Name == name {
			return k.Val
		}
	}
	return nil
}

// Lookup returns the node at path (member names and item indexes), nil if
// there is none.
func (n *Node) Lookup(path ...string) *Node {
	for _, p := range path {
		if n == nil {
			return nil
		}
		switch n.Kind {
		case Object:
			n = n.Get(p)
		case Array:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(n.Items) {
				return nil
			}
			n = n.Items[i]
		default:
			return nil
		}
	}
	return n
}

// maxDepth bounds nesting; the schema is four levels deep.
const maxDepth = 32

// ParseJSON parses one JSON value.
func ParseJSON(b []byte) (*Node, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	n, err := jsonValue(d, 0)
	if err != nil {
		return nil, err
	}
	for i := d.InputOffset(); i < int64(len(b)); i++ {
		if c := b[i]; c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return nil, fmt.Errorf("invalid JSON: unexpected data after the value at offset %d", i)
		}
	}
	return n, nil
}

func jsonErr(d *json.Decoder, err error) error {
	var se *json.SyntaxError
	switch {
	case err == io.EOF && d.InputOffset() == 0:
		return errors.New("invalid JSON: empty input")
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return errors.New("invalid JSON: unexpected end of input")
	case errors.As(err, &se):
		return fmt.Errorf("invalid JSON at offset %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	}
	return fmt.Errorf("invalid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
}

func jsonValue(d *json.Decoder, depth int) (*Node, error) {
	if depth > maxDepth {
		return nil, errors.New("invalid JSON: nested too deeply")
	}
	tok, err := d.Token()
	if err != nil {
		return nil, jsonErr(d, err)
	}
	switch t := tok.(type) {
	case nil:
		return &Node{Kind: Null}, nil
	case bool:
		return &Node{Kind: Bool, Text: strconv.FormatBool(t)}, nil
	case json.Number:
		return &Node{Kind: Number, Text: string(t)}, nil
	case string:
		return &Node{Kind: String, Text: t}, nil
	case json.Delim:
		if t == '[' {
			n := &Node{Kind: Array}
			for d.More() {
				v, err := jsonValue(d, depth+1)
				if err != nil {
					return nil, err
				}
				n.Items = append(n.Items, v)
			}
			if _, err := d.Token(); err != nil {
				return nil, jsonErr(d, err)
			}
			return n, nil
		}
		n := &Node{Kind: Object}
		for d.More() {
			k, err := d.Token()
			if err != nil {
				return nil, jsonErr(d, err)
			}
			v, err := jsonValue(d, depth+1)
			if err != nil {
				return nil, err
			}
			n.Keys = append(n.Keys, Key{Name: k.(string), Val: v})
		}
		if _, err := d.Token(); err != nil {
			return nil, jsonErr(d, err)
		}
		return n, nil
	}
	return nil, fmt.Errorf("invalid JSON: unexpected %v", tok)
}

// maxAliasNodes bounds the nodes that YAML aliases may expand to, against
// "billion laughs" documents.
const maxAliasNodes = 100_000

// ParseYAML parses one YAML document; an empty text is a Null node.
func ParseYAML(b []byte) (*Node, error) {
	d := yaml.NewDecoder(bytes.NewReader(b))
	var doc yaml.Node
	if err := d.Decode(&doc); err != nil {
		if err == io.EOF {
			return &Node{Kind: Null}, nil
		}
		return nil, yamlSyntaxErr(b, err)
	}
	var extra yaml.Node
	if err := d.Decode(&extra); err != io.EOF {
		if err != nil {
			return nil, yamlErr(err)
		}
		return nil, fmt.Errorf("invalid YAML: line %d: a second document; a rules file holds one", extra.Line)
	}
	budget := maxAliasNodes
	return yamlValue(&doc, 0, &budget, 0)
}

func yamlErr(err error) error {
	return errors.New("invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: "))
}

// yamlSyntaxErr is yamlErr for a syntax error of the first document of b,
// at the line where the text goes wrong. yaml.v3 names the line where the
// block around the problem starts: a rule indented one space too far, or
// appended under clients:, was reported lines above it (or on line 1).
// The line reported is the first L such that the text up to and including
// line L fails with the same message, found by bisection.
func yamlSyntaxErr(b []byte, err error) error {
	msg, ok := yamlMessage(err)
	if !ok {
		return yamlErr(err)
	}
	var ends []int // the end of each line, its newline included
	for i, c := range b {
		if c == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(ends) == 0 || ends[len(ends)-1] != len(b) {
		ends = append(ends, len(b))
	}
	fails := func(n int) bool { // the first n lines fail as b does
		var doc yaml.Node
		err := yaml.NewDecoder(bytes.NewReader(b[:ends[n-1]])).Decode(&doc)
		m, ok := yamlMessage(err)
		return ok && m == msg
	}
	lo, hi := 1, len(ends)
	if !fails(hi) {
		return yamlErr(err)
	}
	for lo < hi {
		mid := (lo + hi) / 2
		if fails(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	hint := ""
	if strings.Contains(msg, "did not find expected key") || strings.Contains(msg, "expected '-' indicator") ||
		strings.Contains(msg, "not allowed in this context") || strings.Contains(msg, "tab character") {
		hint = " (check this line's indentation against the lines above; tabs are not allowed)"
	}
	return fmt.Errorf("invalid YAML: line %d: %s%s", lo, msg, hint)
}

// yamlMessage is the text of a yaml.v3 syntax error without its "yaml:
// line N: " prefix; ok is false for another error (or none).
func yamlMessage(err error) (msg string, ok bool) {
	if err == nil || err == io.EOF {
		return "", false
	}
	s, found := strings.CutPrefix(err.Error(), "yaml: line ")
	if !found {
		return "", false
	}
	_, msg, found = strings.Cut(s, ": ")
	return msg, found
}

// yamlValue converts y; aliasLine is the line of the alias being expanded,
// 0 outside aliases.
func yamlValue(y *yaml.Node, depth int, budget *int, aliasLine int) (*Node, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("invalid YAML: line %d: nested too deeply", y.Line)
	}
	if aliasLine > 0 {
		if *budget--; *budget < 0 {
			return nil, fmt.Errorf("invalid YAML: line %d: aliases expand to too many values", aliasLine)
		}
	}
	switch y.Kind {
	case yaml.DocumentNode:
		if len(y.Content) == 0 {
			return &Node{Kind: Null, Line: y.Line}, nil
		}
		return yamlValue(y.Content[0], depth, budget, aliasLine)
	case yaml.AliasNode:
		if y.Alias == nil {
			return nil, fmt.Errorf("invalid YAML: line %d: unknown alias", y.Line)
		}
		if aliasLine == 0 {
			aliasLine = y.Line
		}
		return yamlValue(y.Alias, depth+1, budget, aliasLine)
	case yaml.SequenceNode:
		n := &Node{Kind: Array, Line: y.Line}
		for _, c := range y.Content {
			v, err := yamlValue(c, depth+1, budget, aliasLine)
			if err != nil {
				return nil, err
			}
			n.Items = append(n.Items, v)
		}
		return n, nil
	case yaml.MappingNode:
		n := &Node{Kind: Object, Line: y.Line}
		for i := 0; i+1 < len(y.Content); i += 2 {
			k := y.Content[i]
			for k.Kind == yaml.AliasNode && k.Alias != nil {
				k = k.Alias
			}
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("invalid YAML: line %d: a mapping key must be a plain name", y.Content[i].Line)
			}
			v, err := yamlValue(y.Content[i+1], depth+1, budget, aliasLine)
			if err != nil {
				return nil, err
			}
			n.Keys = append(n.Keys, Key{Name: k.Value, Line: y.Content[i].Line, Val: v})
		}
		return n, nil
	case yaml.ScalarNode:
		n := &Node{Line: y.Line, Text: y.Value, Raw: y.Value, Plain: y.Style == 0}
		switch y.ShortTag() {
		case "!!null":
			n.Kind = Null
		case "!!bool":
			var b bool
			if err := y.Decode(&b); err != nil {
				return nil, fmt.Errorf("invalid YAML: line %d: %s", y.Line, strings.TrimPrefix(err.Error(), "yaml: "))
			}
			n.Kind, n.Text = Bool, strconv.FormatBool(b)
		case "!!int":
			n.Kind = Number
			var i int64
			if y.Decode(&i) == nil {
				n.Text = strconv.FormatInt(i, 10)
			}
		case "!!float":
			n.Kind = Number
		default: // !!str, and !!timestamp, !!binary or a custom tag read as its text
			n.Kind = String
		}
		return n, nil
	}
	return nil, fmt.Errorf("invalid YAML: line %d: unexpected node", y.Line)
}
