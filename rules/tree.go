package rules

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

// The first step of reading outside input (see decode.go): JSON or YAML
// text becomes a tree of tnode, which keeps each value's kind and line.

type tkind uint8

const (
	tnull tkind = iota
	tbool
	tnumber
	tstring
	tobject
	tarray
)

// tnode is one value of a parsed JSON or YAML document.
type tnode struct {
	kind tkind
	line int    // 1-based, YAML only
	text string // string value; number or bool literal
	// raw is a YAML scalar's text as written and plain whether it was
	// written without quotes or a block style (envoyproxy/ratelimit's
	// YAML 1.1 reading: a plain yes is a boolean, a number in a string
	// field is its text).
	raw   string
	plain bool
	keys  []tkey // object members, in order
	items []*tnode
}

type tkey struct {
	name string
	line int
	val  *tnode
}

// describe renders the value for "got ..." in an error message.
func (n *tnode) describe() string {
	switch n.kind {
	case tnull:
		return "null"
	case tbool, tnumber:
		if len(n.text) > 40 {
			return n.text[:40] + "…"
		}
		return n.text
	case tstring:
		return quote.Short(n.text)
	case tobject:
		return "an object"
	}
	return "an array"
}

// lineOf returns the line of the deepest node on path that exists.
func (n *tnode) lineOf(path []string) int {
	line := n.line
	for _, p := range path {
		var next *tnode
		switch n.kind {
		case tobject:
			for _, k := range n.keys {
				if k.name == p {
					line, next = k.line, k.val
					break
				}
			}
		case tarray:
			if i, err := strconv.Atoi(p); err == nil && i >= 0 && i < len(n.items) {
				next = n.items[i]
				line = next.line
			}
		}
		if next == nil {
			break
		}
		n = next
	}
	return line
}

func (n *tnode) get(name string) *tnode {
	for _, k := range n.keys {
		if k.name == name {
			return k.val
		}
	}
	return nil
}

// maxDepth bounds nesting; the schema is four levels deep.
const maxDepth = 32

func parseJSON(b []byte) (*tnode, error) {
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

func jsonValue(d *json.Decoder, depth int) (*tnode, error) {
	if depth > maxDepth {
		return nil, errors.New("invalid JSON: nested too deeply")
	}
	tok, err := d.Token()
	if err != nil {
		return nil, jsonErr(d, err)
	}
	switch t := tok.(type) {
	case nil:
		return &tnode{kind: tnull}, nil
	case bool:
		return &tnode{kind: tbool, text: strconv.FormatBool(t)}, nil
	case json.Number:
		return &tnode{kind: tnumber, text: string(t)}, nil
	case string:
		return &tnode{kind: tstring, text: t}, nil
	case json.Delim:
		if t == '[' {
			n := &tnode{kind: tarray}
			for d.More() {
				v, err := jsonValue(d, depth+1)
				if err != nil {
					return nil, err
				}
				n.items = append(n.items, v)
			}
			if _, err := d.Token(); err != nil {
				return nil, jsonErr(d, err)
			}
			return n, nil
		}
		n := &tnode{kind: tobject}
		for d.More() {
			k, err := d.Token()
			if err != nil {
				return nil, jsonErr(d, err)
			}
			v, err := jsonValue(d, depth+1)
			if err != nil {
				return nil, err
			}
			n.keys = append(n.keys, tkey{name: k.(string), val: v})
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

func parseYAML(b []byte) (*tnode, error) {
	d := yaml.NewDecoder(bytes.NewReader(b))
	var doc yaml.Node
	if err := d.Decode(&doc); err != nil {
		if err == io.EOF {
			return &tnode{kind: tnull}, nil
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
func yamlValue(y *yaml.Node, depth int, budget *int, aliasLine int) (*tnode, error) {
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
			return &tnode{kind: tnull, line: y.Line}, nil
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
		n := &tnode{kind: tarray, line: y.Line}
		for _, c := range y.Content {
			v, err := yamlValue(c, depth+1, budget, aliasLine)
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, v)
		}
		return n, nil
	case yaml.MappingNode:
		n := &tnode{kind: tobject, line: y.Line}
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
			n.keys = append(n.keys, tkey{name: k.Value, line: y.Content[i].Line, val: v})
		}
		return n, nil
	case yaml.ScalarNode:
		n := &tnode{line: y.Line, text: y.Value, raw: y.Value, plain: y.Style == 0}
		switch y.ShortTag() {
		case "!!null":
			n.kind = tnull
		case "!!bool":
			var b bool
			if err := y.Decode(&b); err != nil {
				return nil, fmt.Errorf("invalid YAML: line %d: %s", y.Line, strings.TrimPrefix(err.Error(), "yaml: "))
			}
			n.kind, n.text = tbool, strconv.FormatBool(b)
		case "!!int":
			n.kind = tnumber
			var i int64
			if y.Decode(&i) == nil {
				n.text = strconv.FormatInt(i, 10)
			}
		case "!!float":
			n.kind = tnumber
		default: // !!str, and !!timestamp, !!binary or a custom tag read as its text
			n.kind = tstring
		}
		return n, nil
	}
	return nil, fmt.Errorf("invalid YAML: line %d: unexpected node", y.Line)
}
