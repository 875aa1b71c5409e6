package rules

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/quote"
)

// EnvoyFile is one configuration file of envoyproxy/ratelimit: its name
// (for errors and rule descriptions) and its YAML text.
type EnvoyFile struct {
	Name string
	Data []byte
}

// envoyUnits are the units of envoyproxy/ratelimit's rate_limit.unit (its
// names are case-insensitive) and the fixed window each one is.
var envoyUnits = map[string]time.Duration{
	"second": time.Second,
	"minute": time.Minute,
	"hour":   time.Hour,
	"day":    24 * time.Hour,
	"week":   7 * 24 * time.Hour,
	"month":  30 * 24 * time.Hour,
	"year":   365 * 24 * time.Hour,
}

// ImportEnvoy converts envoyproxy/ratelimit configuration files — one
// domain each, as that service loads from its runtime directory — into a
// Set, one rule per descriptor with a rate_limit:
//
//   - the rule's match is the file's domain and the chain of keys and
//     values from the top-level descriptor down to it (match.entries: a
//     key without a value matches any value, a value ending in "*" every
//     value with that prefix);
//   - it is keyed by the entries whose value varies (entry:<key> for each
//     key without a value or with a wildcard, joined by "+"), or global
//     when every value is fixed: one bucket per distinct descriptor, as in
//     envoyproxy/ratelimit;
//   - requests_per_unit per unit is a fixed window aligned to the epoch
//     (algorithm fixed_window, what envoyproxy/ratelimit counts);
//     requests_per_unit 0 is limit 0 (every call denied); unlimited is an
//     unlimited rule; shadow_mode is shadow;
//   - an entry with share_threshold (a wildcard value) is matched but not
//     keyed: every value it fits shares one bucket;
//   - rate_limit.name is the rule's name, and its id when that is a valid,
//     unused rule id, else the id is <domain>.<n> (n counts the domain's
//     rules in file order); replaces is the rule's replaces; the
//     description names the file, the descriptor chain, detailed_metric and
//     value_to_metric (sluice's metrics are per rule).
//
// A descriptor with neither rate_limit nor nested descriptors is an
// unlimited rule: envoyproxy/ratelimit answers it with no limit, and a less
// specific descriptor must not apply to it.
//
// What sluice cannot express is refused with an error naming the file and
// the descriptor, never dropped: quota_mode and metadata (see
// docs/envoy.md). Two files with one domain are an error, as in
// envoyproxy/ratelimit. The Set is validated.
func ImportEnvoy(files []EnvoyFile) (*Set, error) {
	s := &Set{Rules: []Rule{}}
	domains := make(map[string]string) // domain → file
	ids := make(map[string]bool)
	for _, f := range files {
		n, err := parseYAML(f.Data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name, err)
		}
		if n.kind == tnull {
			continue // an empty file, as envoyproxy/ratelimit skips it
		}
		im := envoyImport{file: f.Name, set: s, ids: ids}
		if err := im.file1(n, domains); err != nil {
			return nil, err
		}
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("imported rules: %w", err)
	}
	return s, nil
}

type envoyImport struct {
	file   string
	domain string
	set    *Set
	ids    map[string]bool
	n      int // limits of this domain so far
}

// fail is an error at line of the file, about what (a descriptor chain).
func (im *envoyImport) fail(line int, what, msg string) error {
	if what != "" {
		msg = what + ": " + msg
	}
	return fmt.Errorf("%s: line %d: %s", im.file, line, msg)
}

func (im *envoyImport) file1(n *tnode, domains map[string]string) error {
	if n.kind != tobject {
		return im.fail(n.line, "", "want a mapping with domain and descriptors, got "+n.describe())
	}
	if err := im.known(n, "", "domain", "descriptors"); err != nil {
		return err
	}
	d := n.get("domain")
	if d == nil || d.kind != tstring || d.text == "" {
		return im.fail(n.line, "", "domain: required, a string")
	}
	if msg := planProblem(d.text); msg != "" {
		return im.fail(d.line, "", "domain: "+msg)
	}
	if prev, dup := domains[d.text]; dup {
		return im.fail(d.line, "", fmt.Sprintf("domain %q is also the domain of %s; a domain is one file", d.text, prev))
	}
	domains[d.text] = im.file
	im.domain = d.text
	if ds := n.get("descriptors"); ds != nil {
		return im.list(ds, nil, nil)
	}
	return nil
}

// known checks that n has no keys outside known.
func (im *envoyImport) known(n *tnode, what string, known ...string) error {
	for i, k := range n.keys {
		ok := false
		for _, w := range known {
			ok = ok || k.name == w
		}
		if !ok {
			return im.fail(k.line, what, fmt.Sprintf("unknown key %s, want one of %s", quote.Short(k.name), strings.Join(known, ", ")))
		}
		for _, p := range n.keys[:i] {
			if p.name == k.name {
				return im.fail(k.line, what, fmt.Sprintf("%s given twice", quote.Short(k.name)))
			}
		}
	}
	return nil
}

// list imports the descriptors of n, under chain; shared[i] says whether
// chain[i] has share_threshold.
func (im *envoyImport) list(n *tnode, chain []Entry, shared []bool) error {
	if n.kind == tnull {
		return nil
	}
	if n.kind != tarray {
		return im.fail(n.line, chainString(chain), "descriptors: want a list, got "+n.describe())
	}
	for _, it := range n.items {
		if err := im.descriptor(it, chain, shared); err != nil {
			return err
		}
	}
	return nil
}

// scalar reads a YAML scalar as envoyproxy/ratelimit reads a string field:
// numbers and booleans as written.
func scalar(n *tnode) (string, bool) {
	switch n.kind {
	case tstring, tnumber, tbool:
		return n.text, true
	case tnull:
		return "", true
	}
	return "", false
}

func (im *envoyImport) descriptor(n *tnode, parent []Entry, pshared []bool) error {
	if n.kind != tobject {
		return im.fail(n.line, chainString(parent), "want a descriptor {key, value, rate_limit, descriptors}, got "+n.describe())
	}
	var e Entry
	if k := n.get("key"); k != nil {
		e.Key, _ = scalar(k)
	}
	if v := n.get("value"); v != nil {
		var ok bool
		if e.Value, ok = scalar(v); !ok {
			return im.fail(v.line, chainString(parent), "value: want a string, got "+v.describe())
		}
	}
	chain := append(append([]Entry(nil), parent...), e)
	what := chainString(chain)
	if err := im.known(n, what, "key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric",
		"value_to_metric", "share_threshold", "quota_mode", "metadata"); err != nil {
		return err
	}
	if e.Key == "" {
		return im.fail(n.line, what, "key: required")
	}
	var f envoyFlags
	var quota, share bool
	for _, b := range []struct {
		name string
		dst  *bool
	}{{"shadow_mode", &f.shadow}, {"detailed_metric", &f.detailed}, {"value_to_metric", &f.valueToMetric},
		{"share_threshold", &share}, {"quota_mode", &quota}} {
		if v := n.get(b.name); v != nil {
			if v.kind != tbool && v.kind != tnull {
				return im.fail(v.line, what, b.name+": want true or false, got "+v.describe())
			}
			*b.dst = v.text == "true"
		}
	}
	if quota {
		return im.fail(n.get("quota_mode").line, what, "quota_mode is not supported by sluice: a sluice call passes only if every rule admits it, "+
			"and a quota descriptor that is over its limit must not deny while another quota descriptor admits (see docs/envoy.md); "+
			"remove quota_mode to import this descriptor as a plain limit")
	}
	if v := n.get("metadata"); v != nil && v.kind != tnull {
		return im.fail(v.line, what, "metadata is not supported by sluice: its Envoy API returns no dynamic metadata (see docs/envoy.md); remove metadata")
	}
	if share && !strings.Contains(e.Value, "*") {
		return im.fail(n.get("share_threshold").line, what, "share_threshold: only on a wildcard value (one containing \"*\"); remove share_threshold or make the value a wildcard")
	}
	shared := append(append([]bool(nil), pshared...), share)
	rl, ds := n.get("rate_limit"), n.get("descriptors")
	switch {
	case rl != nil && rl.kind != tnull:
		if err := im.limit(rl, chain, shared, f); err != nil {
			return err
		}
	case ds == nil || ds.kind == tnull || ds.kind == tarray && len(ds.items) == 0:
		// No limit and nothing nested: envoyproxy/ratelimit matches the
		// descriptor and applies no limit, so a less specific one must
		// not apply either.
		if err := im.add(n.line, chain, shared, f, Rule{Unlimited: true}, "no rate_limit"); err != nil {
			return err
		}
	}
	if ds != nil {
		return im.list(ds, chain, shared)
	}
	return nil
}

// envoyFlags are a descriptor's flags that pass to its rule.
type envoyFlags struct {
	shadow, detailed, valueToMetric bool
}

func (im *envoyImport) limit(n *tnode, chain []Entry, shared []bool, f envoyFlags) error {
	what := chainString(chain)
	if n.kind != tobject {
		return im.fail(n.line, what, "rate_limit: want {unit, requests_per_unit}, got "+n.describe())
	}
	if err := im.known(n, what+": rate_limit", "unit", "requests_per_unit", "unlimited", "name", "replaces"); err != nil {
		return err
	}
	var r Rule
	if nm := n.get("name"); nm != nil && nm.kind != tnull {
		var ok bool
		if r.Name, ok = scalar(nm); !ok {
			return im.fail(nm.line, what, "rate_limit.name: want a string, got "+nm.describe())
		}
	}
	if v := n.get("replaces"); v != nil && v.kind != tnull {
		if v.kind != tarray {
			return im.fail(v.line, what, "rate_limit.replaces: want a list of {name: <rate_limit name>}, got "+v.describe())
		}
		for _, it := range v.items {
			var name string
			if it.kind == tobject {
				if err := im.known(it, what+": rate_limit.replaces", "name"); err != nil {
					return err
				}
				if nm := it.get("name"); nm != nil {
					name, _ = scalar(nm)
				}
			}
			switch {
			case it.kind != tobject:
				return im.fail(it.line, what, "rate_limit.replaces: want {name: <rate_limit name>}, got "+it.describe())
			case name == "":
				return im.fail(it.line, what, "rate_limit.replaces: name: required, the name of the rate_limit to replace")
			case name == r.Name:
				return im.fail(it.line, what, fmt.Sprintf("rate_limit.replaces: %s is this rate_limit's own name; remove it", quote.Short(name)))
			}
			r.Replaces = append(r.Replaces, name)
		}
	}
	u := n.get("unit")
	if v := n.get("unlimited"); v != nil && v.kind != tnull {
		if v.kind != tbool {
			return im.fail(v.line, what, "rate_limit.unlimited: want true or false, got "+v.describe())
		}
		if v.text == "true" {
			if u != nil && u.kind == tstring {
				if _, ok := envoyUnits[strings.ToLower(u.text)]; ok {
					return im.fail(u.line, what, "rate_limit.unit: an unlimited rate_limit takes no unit; remove unit or unlimited")
				}
			}
			r.Unlimited = true
			return im.add(n.line, chain, shared, f, r, "unlimited")
		}
	}
	if u == nil || u.kind != tstring {
		return im.fail(n.line, what, "rate_limit.unit: required, one of second, minute, hour, day, week, month, year")
	}
	window, ok := envoyUnits[strings.ToLower(u.text)]
	if !ok {
		return im.fail(u.line, what, fmt.Sprintf("rate_limit.unit: want one of second, minute, hour, day, week, month, year, got %s", quote.Short(u.text)))
	}
	rpu := n.get("requests_per_unit")
	if rpu == nil || rpu.kind != tnumber {
		return im.fail(n.line, what, "rate_limit.requests_per_unit: required, a whole number")
	}
	limit, err := strconv.ParseInt(rpu.text, 10, 64)
	switch {
	case err != nil || limit < 0 || limit > 1<<32-1:
		return im.fail(rpu.line, what, fmt.Sprintf("rate_limit.requests_per_unit: want a whole number from 0 to 4294967295, got %s", rpu.text))
	case limit > MaxLimit:
		return im.fail(rpu.line, what, fmt.Sprintf("rate_limit.requests_per_unit: at most %d in sluice, got %d", int64(MaxLimit), limit))
	}
	r.Limit, r.Window, r.Algorithm = limit, Duration(window), algorithm.FixedWindow
	return im.add(n.line, chain, shared, f, r, "")
}

// add completes r, the rule of the descriptor chain at line — its id,
// description, match, key and flags — checks it and adds it to the Set.
// note, when not "", goes in the description.
func (im *envoyImport) add(line int, chain []Entry, shared []bool, f envoyFlags, r Rule, note string) error {
	what := chainString(chain)
	im.n++
	id := ""
	if validID(r.Name) == nil && !im.ids[r.Name] {
		id = r.Name
	}
	if id == "" {
		base := strings.Map(func(c rune) rune {
			switch {
			case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
				return c
			case 'A' <= c && c <= 'Z':
				return c + 'a' - 'A'
			}
			return '-'
		}, im.domain)
		suffix := "." + strconv.Itoa(im.n)
		if len(base)+len(suffix) > maxIDLen {
			base = base[:maxIDLen-len(suffix)]
		}
		id = base + suffix
		for im.ids[id] { // a name took it
			id += "x"
		}
	}
	im.ids[id] = true
	var by []string
	for i, e := range chain {
		if e.Value == "" || strings.Contains(e.Value, "*") && !shared[i] {
			by = append(by, "entry:"+e.Key)
		}
	}
	r.ID = id
	r.Description = "envoyproxy/ratelimit " + im.file + ": " + what
	r.Match = Match{Domain: im.domain, Entries: chain}
	r.By = ByGlobal
	r.Shadow = f.shadow
	for _, x := range []struct {
		on   bool
		text string
	}{{note != "", note}, {f.detailed, "detailed_metric"}, {f.valueToMetric, "value_to_metric"}} {
		if x.on {
			r.Description += " (" + x.text + ")"
		}
	}
	if len(by) > 0 {
		r.By = By(strings.Join(by, "+"))
	}
	if len(by) > MaxKeyParts {
		return im.fail(line, what, fmt.Sprintf("%d entries without a fixed value; sluice keys a rule by at most %d", len(by), MaxKeyParts))
	}
	if err := r.Validate(); err != nil {
		return im.fail(line, what, err.Error())
	}
	im.set.Rules = append(im.set.Rules, r)
	return nil
}

// chainString renders a descriptor chain: `domain "rl", foo > bar=banned`.
func chainString(chain []Entry) string {
	var b strings.Builder
	for i, e := range chain {
		if i > 0 {
			b.WriteString(" > ")
		}
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteString("=" + e.Value)
		}
	}
	return b.String()
}
