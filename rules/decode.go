package rules

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/quote"
	"github.com/sluicehq/sluice/internal/seam/rulewire"
)

// The admin API's bodies and the PostgreSQL store's rows are read through
// internal/seam/rulewire, which this sets.
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
		if n.Kind != tobject {
			if n.Kind == tnull {
				return nil, ErrNoRules
			}
		} else if r := n.Get("rules"); r == nil || r.Kind == tnull {
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
			fe.Line = n.LineOf(fe.path)
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
		Line:    n.Line,
		path:    append(append([]string(nil), d.path...), name),
	}
}

func (d decoder) wrongType(n *tnode, want, name string) *FieldError {
	return d.err(n, "want "+want+", got "+n.Describe(), name)
}

// object checks that n, the current object, is an object whose keys are
// all in known and none given twice.
func (d decoder) object(n *tnode, known ...string) error {
	if n.Kind != tobject {
		if d.prefix == "" {
			return fmt.Errorf("want an object at the top level, got %s", n.Describe())
		}
		return &FieldError{Field: strings.TrimSuffix(d.prefix, "."), Message: "want an object, got " + n.Describe(), Line: n.Line, path: d.path}
	}
	for i, k := range n.Keys {
		if !slices.Contains(known, k.Name) {
			fe := d.err(n, "unknown field, want one of "+strings.Join(known, ", "), k.Name)
			fe.Field, fe.Line = d.prefix+quoteKey(k.Name), k.Line
			return fe
		}
		for _, prev := range n.Keys[:i] {
			if prev.Name == k.Name {
				fe := d.err(n, "given twice", k.Name)
				fe.Line = k.Line
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
	for _, k := range n.Keys {
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
	switch n.Kind {
	case tnull:
		return nil
	case tstring:
		*dst = n.Text
		return nil
	}
	return d.wrongType(n, "a string", name)
}

func (d decoder) int(n *tnode, name string, dst *int64) error {
	switch n.Kind {
	case tnull:
		return nil
	case tnumber:
		v, err := strconv.ParseInt(n.Text, 10, 64)
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
	switch n.Kind {
	case tnull:
		return nil
	case tbool:
		*dst = n.Text == "true"
		return nil
	}
	return d.wrongType(n, "true or false", name)
}

// decodeSet decodes n into a Set; a null n (an empty YAML document) is an
// empty Set when allowEmpty.
func decodeSet(n *tnode, allowEmpty bool) (*Set, error) {
	s := &Set{Rules: []Rule{}}
	if n.Kind == tnull && allowEmpty {
		return s, nil
	}
	var d decoder
	err := d.members(n, func(k tkey) error {
		switch k.Name {
		case "revision":
			return d.int(k.Val, k.Name, &s.Revision)
		case "default_plan":
			return d.str(k.Val, k.Name, &s.DefaultPlan)
		case "rules":
			return decodeRules(k.Val, s)
		default: // "clients"
			return decodeClients(k.Val, s)
		}
	}, "revision", "default_plan", "rules", "clients")
	if err != nil {
		return nil, err
	}
	return s, nil
}

func decodeRules(n *tnode, s *Set) error {
	switch n.Kind {
	case tnull:
		return nil
	case tarray:
	default:
		return decoder{}.wrongType(n, "a list of rules", "rules")
	}
	s.Rules = make([]Rule, 0, len(n.Items))
	for i, item := range n.Items {
		// Name the rule by its id when it has one, as Validate does.
		id := ""
		if item.Kind == tobject {
			if v := item.Get("id"); v != nil && v.Kind == tstring {
				id = v.Text
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
		switch k.Name {
		case "match":
			r.Match, err = decodeMatch(*d, k.Val)
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
	if l := n.Get("limit"); !r.Unlimited && (l == nil || l.Kind == tnull) {
		fe := d.err(n, "required: the calls admitted per window (0 denies every call), or unlimited: true", "limit")
		if l != nil {
			fe.Line = l.Line
		}
		return Rule{}, fe
	}
	return r, nil
}

// decodeMatch decodes the rule's match block; null is the zero Match.
func decodeMatch(d decoder, n *tnode) (Match, error) {
	var m Match
	if n.Kind == tnull {
		return m, nil
	}
	md := d.at("match")
	err := md.members(n, func(mk tkey) error {
		var err error
		switch mk.Name {
		case "domain":
			err = md.str(mk.Val, mk.Name, &m.Domain)
		case "plan":
			err = md.str(mk.Val, mk.Name, &m.Plan)
		case "path_case":
			err = md.str(mk.Val, mk.Name, (*string)(&m.PathCase))
		case "headers":
			m.Headers, err = decodeHeaders(md, mk.Val)
		case "entries":
			m.Entries, err = decodeEntries(md, mk.Val)
		default:
			err = md.str(mk.Val, mk.Name, &m.Endpoint)
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
	v := k.Val
	switch k.Name {
	case "limit":
		return d.int(v, k.Name, &r.Limit)
	case "window":
		return d.duration(v, k.Name, &r.Window)
	case "max_reserve_wait":
		return d.duration(v, k.Name, &r.MaxReserveWait)
	case "burst":
		return d.int(v, k.Name, &r.Burst)
	case "algorithm":
		var s string
		if err := d.str(v, k.Name, &s); err != nil {
			return err
		}
		kind, perr := algorithm.ParseKind(s)
		if perr != nil {
			return d.err(v, fmt.Sprintf("unknown algorithm %s, want one of %s", quote.Short(s), validAlgorithmSet), k.Name)
		}
		r.Algorithm = kind
	case "unlimited":
		return d.bool(v, k.Name, &r.Unlimited)
	}
	return nil
}

// duration decodes a duration written as text ("1m", "500ms", "7d") into
// *dst; null leaves it as it is.
func (d decoder) duration(v *tnode, name string, dst *Duration) error {
	var s string
	if err := d.str(v, name, &s); err != nil || v.Kind == tnull {
		if v.Kind == tnumber {
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
	v := k.Val
	switch k.Name {
	case "id":
		return d.str(v, k.Name, &r.ID)
	case "description":
		return d.str(v, k.Name, &r.Description)
	case "by":
		return d.str(v, k.Name, (*string)(&r.By))
	case "failure_mode":
		return d.str(v, k.Name, (*string)(&r.FailureMode))
	case "charge":
		return d.str(v, k.Name, (*string)(&r.Charge))
	case "lease":
		return d.str(v, k.Name, (*string)(&r.Lease))
	case "shadow":
		return d.bool(v, k.Name, &r.Shadow)
	case "quota":
		return d.bool(v, k.Name, &r.Quota)
	case "enabled":
		if v.Kind == tnull {
			return nil
		}
		var b bool
		if err := d.bool(v, k.Name, &b); err != nil {
			return err
		}
		r.Enabled = &b
	case "name":
		return d.str(v, k.Name, &r.Name)
	case "replaces":
		var err error
		r.Replaces, err = decodeNames(d, v, k.Name)
		return err
	}
	return nil
}

// decodeNames decodes a list of names (replaces).
func decodeNames(d decoder, n *tnode, name string) ([]string, error) {
	switch n.Kind {
	case tnull:
		return nil, nil
	case tarray:
	default:
		return nil, d.wrongType(n, "a list of rule names", name)
	}
	names := make([]string, 0, len(n.Items))
	for i, it := range n.Items {
		at := name + "[" + strconv.Itoa(i) + "]"
		if it.Kind != tstring {
			return nil, d.wrongType(it, "a rule name (a string)", at)
		}
		names = append(names, it.Text)
	}
	return names, nil
}

func decodeClients(n *tnode, s *Set) error {
	d := decoder{}
	switch n.Kind {
	case tnull:
		return nil
	case tobject:
	default:
		return d.wrongType(n, "an object of client id to {plan: ...}", "clients")
	}
	s.Clients = make(map[string]Client, len(n.Keys))
	for _, k := range n.Keys {
		if _, dup := s.Clients[k.Name]; dup {
			return &FieldError{Field: clientField(k.Name), Message: "given twice", Line: k.Line, path: []string{"clients", k.Name}}
		}
		cd := decoder{prefix: clientField(k.Name) + ".", path: []string{"clients", k.Name}}
		if err := cd.object(k.Val, "plan"); err != nil {
			return err
		}
		var c Client
		for _, ck := range k.Val.Keys {
			if err := cd.str(ck.Val, ck.Name, &c.Plan); err != nil {
				return err
			}
		}
		s.Clients[k.Name] = c
	}
	if len(s.Clients) == 0 {
		s.Clients = nil
	}
	return nil
}

// decodeEntries decodes match.entries: a list of {key, value}.
func decodeEntries(d decoder, n *tnode) ([]Entry, error) {
	if n.Kind == tnull {
		return nil, nil
	}
	if n.Kind != tarray {
		return nil, d.wrongType(n, "a list of {key, value}", "entries")
	}
	es := make([]Entry, 0, len(n.Items))
	for i, it := range n.Items {
		ed := d.at("entries[" + strconv.Itoa(i) + "]")
		if err := ed.object(it, "key", "value"); err != nil {
			return nil, err
		}
		var e Entry
		for _, k := range it.Keys {
			var err error
			if k.Name == "key" {
				err = ed.str(k.Val, k.Name, &e.Key)
			} else {
				err = ed.str(k.Val, k.Name, &e.Value)
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
	if n.Kind == tnull {
		return nil, nil
	}
	if n.Kind != tobject {
		return nil, d.wrongType(n, `an object of header name to value, such as {"X-Tenant": "acme"}`, "headers")
	}
	hd := d.at("headers")
	h := make(map[string]string, len(n.Keys))
	for _, k := range n.Keys {
		at := "[" + quote.Short(k.Name) + "]"
		if _, dup := h[k.Name]; dup {
			fe := hd.err(k.Val, "given twice", k.Name)
			fe.Field, fe.Line = strings.TrimSuffix(hd.prefix, ".")+at, k.Line
			return nil, fe
		}
		if k.Val.Kind != tstring {
			fe := hd.wrongType(k.Val, `a string: `+headerValueForm, k.Name)
			fe.Field = strings.TrimSuffix(hd.prefix, ".") + at
			return nil, fe
		}
		h[k.Name] = k.Val.Text
	}
	if len(h) == 0 {
		return nil, nil
	}
	return h, nil
}
