package rules

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/quote"
	"github.com/sluicehq/sluice/internal/rulewire"
)

// The admin API's bodies and the PostgreSQL store's rows are read through
// internal/rulewire, which this sets.
func init() {
	rulewire.DecodeRuleJSON = func(b []byte, r any) (err error) {
		*r.(*Rule), err = decodeRuleJSON(b)
		return err
	}
	rulewire.DecodeSetJSON = func(b []byte, s any) error {
		set, err := decodeSetJSON(b)
		if err == nil {
			*s.(*Set) = *set
		}
		return err
	}
	rulewire.EncodeYAMLOnto = func(prev []byte, s any) ([]byte, error) {
		return encodeYAMLOnto(prev, s.(*Set))
	}
}

// Outside input (an admin API body, a rules file) is read in two steps:
// the JSON or YAML text becomes a small generic tree (tnode) that keeps
// each value's kind and line, then one strict decoder turns the tree into
// a Set or Rule. Doing the second step by hand, rather than through
// encoding/json or yaml.v3 struct decoding, is what lets every error name
// the full path of the field ("rules[2] (id "x").limit"), say what was
// wanted and what was found ("want an integer, got 1.5"), and carry the YAML
// line — and it keeps JSON and YAML to exactly one schema.

// decodeRuleJSON decodes one rule from JSON strictly (unknown or duplicate
// fields, wrong types and trailing data are errors) and validates it. Errors
// about a field are *FieldError.
func decodeRuleJSON(b []byte) (Rule, error) {
	n, err := parseJSON(b)
	if err != nil {
		return Rule{}, err
	}
	r, err := decodeRule(n, nil)
	if err != nil {
		return Rule{}, err
	}
	if err := r.Validate(); err != nil {
		return Rule{}, err
	}
	return r, nil
}

// decodeSetJSON decodes a whole Set from JSON strictly, like decodeRuleJSON,
// and validates it.
func decodeSetJSON(b []byte) (*Set, error) {
	n, err := parseJSON(b)
	if err != nil {
		return nil, err
	}
	s, err := decodeSet(n, false)
	if err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// ErrNoRules is the error of ParseRulesFile for a document that does not
// say what the rules are: no rules: list at all (an empty file, only
// comments, the empty output of a failed command) or a null one. Zero
// rules lift every limit, so they must be written out: "rules: []".
var ErrNoRules = errors.New(`rules: the document has no "rules:" list, and zero rules would lift every limit; write "rules: []" to mean no rules`)

// ParseYAML reads a rules file strictly (unknown or duplicate keys and wrong
// types are errors) and validates it. Errors about a field are *FieldError
// with the line set. An empty document is an empty Set.
func ParseYAML(b []byte) (*Set, error) { return parseYAMLSet(b, false) }

// ParseRulesFile is ParseYAML for a document that replaces every rule (a
// rules file, what `sluice rules apply` sends): one without a rules: list
// is ErrNoRules rather than an empty Set.
func ParseRulesFile(b []byte) (*Set, error) { return parseYAMLSet(b, true) }

func parseYAMLSet(b []byte, needRules bool) (*Set, error) {
	n, err := parseYAML(b)
	if err != nil {
		return nil, err
	}
	if needRules {
		if n.kind != tobject {
			if n.kind == tnull {
				return nil, ErrNoRules
			}
		} else if r := n.get("rules"); r == nil || r.kind == tnull {
			return nil, ErrNoRules
		}
	}
	s, err := decodeSet(n, true)
	if err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			fe.Line = n.lineOf(fe.path)
		}
		return nil, err
	}
	return s, nil
}

// decoder is the strict decoder's place in the document: the object being
// decoded, as the rendered field prefix ("rules[2] (id "x")." or "" at the
// top) and as path components for FieldError.path.
type decoder struct {
	prefix string
	path   []string
}

// at returns the decoder for the object in member name.
func (d decoder) at(name string) decoder {
	return decoder{prefix: d.prefix + name + ".", path: append(append([]string(nil), d.path...), name)}
}

// err is an error about member name of the current object, found at n.
func (d decoder) err(n *tnode, msg, name string) *FieldError {
	return &FieldError{
		Field:   d.prefix + name,
		Message: msg,
		Line:    n.line,
		path:    append(append([]string(nil), d.path...), name),
	}
}

func (d decoder) wrongType(n *tnode, want, name string) *FieldError {
	return d.err(n, "want "+want+", got "+n.describe(), name)
}

// object checks that n, the current object, is an object whose keys are
// all in known and none given twice.
func (d decoder) object(n *tnode, known ...string) error {
	if n.kind != tobject {
		if d.prefix == "" {
			return fmt.Errorf("want an object at the top level, got %s", n.describe())
		}
		return &FieldError{Field: strings.TrimSuffix(d.prefix, "."), Message: "want an object, got " + n.describe(), Line: n.line, path: d.path}
	}
	for i, k := range n.keys {
		if !slices.Contains(known, k.name) {
			fe := d.err(n, "unknown field, want one of "+strings.Join(known, ", "), k.name)
			fe.Field, fe.Line = d.prefix+quoteKey(k.name), k.line
			return fe
		}
		for _, prev := range n.keys[:i] {
			if prev.name == k.name {
				fe := d.err(n, "given twice", k.name)
				fe.Line = k.line
				return fe
			}
		}
	}
	return nil
}

// members checks n as object does, then decodes its members in document
// order with each, stopping at the first error: the error is about the
// first bad member.
func (d decoder) members(n *tnode, each func(k tkey) error, known ...string) error {
	if err := d.object(n, known...); err != nil {
		return err
	}
	for _, k := range n.keys {
		if err := each(k); err != nil {
			return err
		}
	}
	return nil
}

// quoteKey renders an unknown field name, quoting it unless it is a plain
// word.
func quoteKey(k string) string {
	if k == "" {
		return `""`
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; !isAlnum(c) && c != '_' && c != '-' {
			return quote.Short(k)
		}
	}
	return k
}

func (d decoder) str(n *tnode, name string, dst *string) error {
	switch n.kind {
	case tnull:
		return nil
	case tstring:
		*dst = n.text
		return nil
	}
	return d.wrongType(n, "a string", name)
}

func (d decoder) int(n *tnode, name string, dst *int64) error {
	switch n.kind {
	case tnull:
		return nil
	case tnumber:
		v, err := strconv.ParseInt(n.text, 10, 64)
		if err == nil {
			*dst = v
			return nil
		}
		if errors.Is(err, strconv.ErrRange) {
			return d.wrongType(n, "an integer in range", name)
		}
	}
	return d.wrongType(n, "an integer", name)
}

func (d decoder) bool(n *tnode, name string, dst *bool) error {
	switch n.kind {
	case tnull:
		return nil
	case tbool:
		*dst = n.text == "true"
		return nil
	}
	return d.wrongType(n, "true or false", name)
}

// decodeSet decodes n into a Set; a null n (an empty YAML document) is an
// empty Set when allowEmpty.
func decodeSet(n *tnode, allowEmpty bool) (*Set, error) {
	s := &Set{Rules: []Rule{}}
	if n.kind == tnull && allowEmpty {
		return s, nil
	}
	var d decoder
	err := d.members(n, func(k tkey) error {
		switch k.name {
		case "revision":
			return d.int(k.val, k.name, &s.Revision)
		case "default_plan":
			return d.str(k.val, k.name, &s.DefaultPlan)
		case "rules":
			return decodeRules(k.val, s)
		default: // "clients"
			return decodeClients(k.val, s)
		}
	}, "revision", "default_plan", "rules", "clients")
	if err != nil {
		return nil, err
	}
	return s, nil
}

func decodeRules(n *tnode, s *Set) error {
	switch n.kind {
	case tnull:
		return nil
	case tarray:
	default:
		return decoder{}.wrongType(n, "a list of rules", "rules")
	}
	s.Rules = make([]Rule, 0, len(n.items))
	for i, item := range n.items {
		// Name the rule by its id when it has one, as Validate does.
		id := ""
		if item.kind == tobject {
			if v := item.get("id"); v != nil && v.kind == tstring {
				id = v.text
			}
		}
		r, err := decodeRule(item, &decoder{prefix: ruleField(i, id) + ".", path: []string{"rules", strconv.Itoa(i)}})
		if err != nil {
			return err
		}
		s.Rules = append(s.Rules, r)
	}
	return nil
}

var ruleFields = []string{"id", "description", "match", "by", "limit", "window", "burst", "algorithm", "max_reserve_wait", "failure_mode", "charge", "lease", "shadow", "quota", "enabled", "unlimited", "name", "replaces"}

// decodeRule decodes n into a Rule; d places it in a Set (nil: top level).
// Members are decoded in document order, so the error is about the first bad
// one; decodeMatch, decodeLimitField and decodeRuleField each decode one
// group of fields.
func decodeRule(n *tnode, d *decoder) (Rule, error) {
	if d == nil {
		d = &decoder{}
	}
	var r Rule
	err := d.members(n, func(k tkey) error {
		var err error
		switch k.name {
		case "match":
			r.Match, err = decodeMatch(*d, k.val)
		case "limit", "window", "burst", "algorithm", "max_reserve_wait", "unlimited":
			err = decodeLimitField(*d, k, &r)
		default:
			err = decodeRuleField(*d, k, &r)
		}
		return err
	}, ruleFields...)
	if err != nil {
		return Rule{}, err
	}
	// A limit left out is not limit 0, which denies every call.
	if l := n.get("limit"); !r.Unlimited && (l == nil || l.kind == tnull) {
		fe := d.err(n, "required: the calls admitted per window (0 denies every call), or unlimited: true", "limit")
		if l != nil {
			fe.Line = l.line
		}
		return Rule{}, fe
	}
	return r, nil
}

// decodeMatch decodes the rule's match block; null is the zero Match.
func decodeMatch(d decoder, n *tnode) (Match, error) {
	var m Match
	if n.kind == tnull {
		return m, nil
	}
	md := d.at("match")
	err := md.members(n, func(mk tkey) error {
		var err error
		switch mk.name {
		case "domain":
			err = md.str(mk.val, mk.name, &m.Domain)
		case "plan":
			err = md.str(mk.val, mk.name, &m.Plan)
		case "path_case":
			err = md.str(mk.val, mk.name, (*string)(&m.PathCase))
		case "headers":
			m.Headers, err = decodeHeaders(md, mk.val)
		case "entries":
			m.Entries, err = decodeEntries(md, mk.val)
		default:
			err = md.str(mk.val, mk.name, &m.Endpoint)
		}
		return err
	}, "domain", "plan", "endpoint", "path_case", "headers", "entries")
	if err != nil {
		return Match{}, err
	}
	return m, nil
}

// decodeLimitField decodes member k of the rule's limit group (limit,
// window, burst, algorithm, unlimited) into r.
func decodeLimitField(d decoder, k tkey, r *Rule) error {
	v := k.val
	switch k.name {
	case "limit":
		return d.int(v, k.name, &r.Limit)
	case "window":
		return d.duration(v, k.name, &r.Window)
	case "max_reserve_wait":
		return d.duration(v, k.name, &r.MaxReserveWait)
	case "burst":
		return d.int(v, k.name, &r.Burst)
	case "algorithm":
		var s string
		if err := d.str(v, k.name, &s); err != nil {
			return err
		}
		kind, perr := algorithm.ParseKind(s)
		if perr != nil {
			return d.err(v, fmt.Sprintf("unknown algorithm %s, want one of %s", quote.Short(s), validAlgorithmSet), k.name)
		}
		r.Algorithm = kind
	case "unlimited":
		return d.bool(v, k.name, &r.Unlimited)
	}
	return nil
}

// duration decodes a duration written as text ("1m", "500ms", "7d") into
// *dst; null leaves it as it is.
func (d decoder) duration(v *tnode, name string, dst *Duration) error {
	var s string
	if err := d.str(v, name, &s); err != nil || v.kind == tnull {
		if v.kind == tnumber {
			err = d.wrongType(v, `a duration such as "1m", "500ms", "24h" or "7d"`, name)
		}
		return err
	}
	w, perr := parseDuration(s)
	if perr != nil {
		return d.wrongType(v, `a duration such as "1m", "500ms", "24h" or "7d"`, name)
	}
	*dst = w
	return nil
}

// decodeRuleField decodes member k of the rest of the rule (id,
// description, by, failure_mode, charge, lease, shadow, quota, enabled, name,
// replaces) into r.
func decodeRuleField(d decoder, k tkey, r *Rule) error {
	v := k.val
	switch k.name {
	case "id":
		return d.str(v, k.name, &r.ID)
	case "description":
		return d.str(v, k.name, &r.Description)
	case "by":
		return d.str(v, k.name, (*string)(&r.By))
	case "failure_mode":
		return d.str(v, k.name, (*string)(&r.FailureMode))
	case "charge":
		return d.str(v, k.name, (*string)(&r.Charge))
	case "lease":
		return d.str(v, k.name, (*string)(&r.Lease))
	case "shadow":
		return d.bool(v, k.name, &r.Shadow)
	case "quota":
		return d.bool(v, k.name, &r.Quota)
	case "enabled":
		if v.kind == tnull {
			return nil
		}
		var b bool
		if err := d.bool(v, k.name, &b); err != nil {
			return err
		}
		r.Enabled = &b
	case "name":
		return d.str(v, k.name, &r.Name)
	case "replaces":
		var err error
		r.Replaces, err = decodeNames(d, v, k.name)
		return err
	}
	return nil
}

// decodeNames decodes a list of names (replaces).
func decodeNames(d decoder, n *tnode, name string) ([]string, error) {
	switch n.kind {
	case tnull:
		return nil, nil
	case tarray:
	default:
		return nil, d.wrongType(n, "a list of rule names", name)
	}
	names := make([]string, 0, len(n.items))
	for i, it := range n.items {
		at := name + "[" + strconv.Itoa(i) + "]"
		if it.kind != tstring {
			return nil, d.wrongType(it, "a rule name (a string)", at)
		}
		names = append(names, it.text)
	}
	return names, nil
}

func decodeClients(n *tnode, s *Set) error {
	d := decoder{}
	switch n.kind {
	case tnull:
		return nil
	case tobject:
	default:
		return d.wrongType(n, "an object of client id to {plan: ...}", "clients")
	}
	s.Clients = make(map[string]Client, len(n.keys))
	for _, k := range n.keys {
		if _, dup := s.Clients[k.name]; dup {
			return &FieldError{Field: clientField(k.name), Message: "given twice", Line: k.line, path: []string{"clients", k.name}}
		}
		cd := decoder{prefix: clientField(k.name) + ".", path: []string{"clients", k.name}}
		if err := cd.object(k.val, "plan"); err != nil {
			return err
		}
		var c Client
		for _, ck := range k.val.keys {
			if err := cd.str(ck.val, ck.name, &c.Plan); err != nil {
				return err
			}
		}
		s.Clients[k.name] = c
	}
	if len(s.Clients) == 0 {
		s.Clients = nil
	}
	return nil
}

// decodeEntries decodes match.entries: a list of {key, value}.
func decodeEntries(d decoder, n *tnode) ([]Entry, error) {
	if n.kind == tnull {
		return nil, nil
	}
	if n.kind != tarray {
		return nil, d.wrongType(n, "a list of {key, value}", "entries")
	}
	es := make([]Entry, 0, len(n.items))
	for i, it := range n.items {
		ed := d.at("entries[" + strconv.Itoa(i) + "]")
		if err := ed.object(it, "key", "value"); err != nil {
			return nil, err
		}
		var e Entry
		for _, k := range it.keys {
			var err error
			if k.name == "key" {
				err = ed.str(k.val, k.name, &e.Key)
			} else {
				err = ed.str(k.val, k.name, &e.Value)
			}
			if err != nil {
				return nil, err
			}
		}
		es = append(es, e)
	}
	return es, nil
}

// decodeHeaders decodes match.headers: an object of header name to value.
func decodeHeaders(d decoder, n *tnode) (map[string]string, error) {
	if n.kind == tnull {
		return nil, nil
	}
	if n.kind != tobject {
		return nil, d.wrongType(n, `an object of header name to value, such as {"X-Tenant": "acme"}`, "headers")
	}
	hd := d.at("headers")
	h := make(map[string]string, len(n.keys))
	for _, k := range n.keys {
		at := "[" + quote.Short(k.name) + "]"
		if _, dup := h[k.name]; dup {
			fe := hd.err(k.val, "given twice", k.name)
			fe.Field, fe.Line = strings.TrimSuffix(hd.prefix, ".")+at, k.line
			return nil, fe
		}
		if k.val.kind != tstring {
			fe := hd.wrongType(k.val, `a string: `+headerValueForm, k.name)
			fe.Field = strings.TrimSuffix(hd.prefix, ".") + at
			return nil, fe
		}
		h[k.name] = k.val.text
	}
	if len(h) == 0 {
		return nil, nil
	}
	return h, nil
}
