// Package envoyconf loads envoyproxy/ratelimit's configuration files into
// a rules.Set: what sluice serve does with a runtime directory or xDS
// RateLimitConfig resources, and what sluice rules import converts.
package envoyconf

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/doctree"
	"github.com/sluicehq/sluice/internal/quote"
	"github.com/sluicehq/sluice/internal/ruleid"
	"github.com/sluicehq/sluice/internal/rulekey"
	"github.com/sluicehq/sluice/rules"
)

// File is one configuration file of envoyproxy/ratelimit: its name
// (for errors and rule descriptions) and its YAML text.
type File struct {
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

// Options are the settings of envoyproxy/ratelimit that change how
// its configuration loads. The zero value is its default.
type Options struct {
	// MergeDomains is its MERGE_DOMAIN_CONFIG: files of one domain add
	// their descriptors to it (a descriptor a file repeats at the top
	// level is still refused). Default false: a domain is one file.
	MergeDomains bool
	// Shadow is its SHADOW_MODE: every rule is shadow (it never denies).
	Shadow bool
	// Quota is its QUOTA_MODE: every rule is quota.
	Quota bool
	// ChargeAfterResponse selects the descriptors whose calls with a
	// hits_addend above 0 are charges after the response: their rules
	// get charge: after_response (unlimited ones excepted). It is
	// sluice's, not envoyproxy/ratelimit's: its configuration has no
	// such field, and Envoy marks nothing in the report it sends after
	// the response.
	ChargeAfterResponse []Selector
}

// Load converts envoyproxy/ratelimit configuration files — one
// domain each, as that service loads from its runtime directory or its
// xDS RateLimitConfig resources — into a rules.Set, one rule per descriptor with
// a rate_limit:
//
//   - the rule's match is the file's domain (any string) and the chain of
//     keys and values from the top-level descriptor down to it
//     (match.entries: a key without a value matches any value, a value
//     ending in "*" every value with that prefix);
//   - it is keyed by the entries whose value varies (entry:<key> for each
//     key without a value or with a wildcard, joined by "+"), or global
//     when every value is fixed: one bucket per distinct descriptor, as in
//     envoyproxy/ratelimit;
//   - requests_per_unit (0 to 4294967295) per unit is a fixed window
//     aligned to the epoch (algorithm fixed_window, what
//     envoyproxy/ratelimit counts); requests_per_unit 0 is limit 0 (every
//     call denied); unlimited is an unlimited rule; shadow_mode is shadow;
//     quota_mode is quota;
//   - an entry with share_threshold (a wildcard value) is matched but not
//     keyed: every value it fits shares one bucket;
//   - rate_limit.name is the rule's name, and its id when that is a valid,
//     unused rule id, else the id is <domain>.<n> (n counts the domain's
//     rules in file order, the domain's characters outside a-z 0-9 . _ -
//     as "-"); replaces is the rule's replaces; the description names the
//     file, the descriptor chain, detailed_metric and value_to_metric;
//     the rules with detailed_metric are also in LoadResult's
//     Result.DetailedMetric (statistics per value, internal/rls).
//     metadata is read and checked, and
//     kept nowhere: it only goes into envoyproxy/ratelimit's answers with
//     RESPONSE_DYNAMIC_METADATA, which sluice does not offer.
//
// A descriptor with neither rate_limit nor nested descriptors is an
// unlimited rule: envoyproxy/ratelimit answers it with no limit, and a less
// specific descriptor must not apply to it.
//
// The files load exactly when envoyproxy/ratelimit loads them: YAML read
// as it reads it (YAML 1.1: a plain yes or on is true; a number in a
// string field is its text; a key given twice keeps its last value), every
// mapping key one of its keys, a list holding mappings only, no fractional
// or out-of-range number, a non-empty domain and key, a valid unit (any
// letter case), no unit on an unlimited rate_limit, replaces naming
// another rate_limit, share_threshold only on a wildcard, no two
// descriptors of one level with the same key and value (its "composite
// key": key_value, or key alone), no domain in two files unless
// opt.MergeDomains. An empty file is refused (it has no domain). What is
// refused is an error naming the file, the line and the descriptor. A key
// it knows that has no meaning where it stands (a unit beside key) is
// ignored, as it ignores it, and named in the notes. The rules.Set is
// validated.
func Load(files []File, opt Options) (*rules.Set, []string, error) {
	r, err := LoadResult(files, opt)
	if err != nil {
		return nil, nil, err
	}
	return r.Set, r.Notes, nil
}

// Result is what Load makes of the files, and the ids of the rules whose
// descriptor has detailed_metric: true (envoyproxy/ratelimit's statistics
// per descriptor value; internal/rls counts them so).
type Result struct {
	Set            *rules.Set
	Notes          []string
	DetailedMetric map[string]bool
}

// LoadResult is Load, with the rules that have detailed_metric.
func LoadResult(files []File, opt Options) (*Result, error) {
	s := &rules.Set{Rules: []rules.Rule{}}
	ld := &envoyLoad{opt: opt, set: s, ids: make(map[string]bool), domains: make(map[string]*envoyDomain),
		charged: make([]bool, len(opt.ChargeAfterResponse))}
	for _, f := range files {
		n, err := doctree.ParseYAML(f.Data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name, err)
		}
		im := envoyImport{envoyLoad: ld, file: f.Name}
		if err := im.file1(n); err != nil {
			return nil, err
		}
	}
	for i, sel := range opt.ChargeAfterResponse {
		if !ld.charged[i] {
			ld.notes = append(ld.notes, fmt.Sprintf("charge after response: %s selects no descriptor with a rate_limit", quote.Short(sel.String())))
		}
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("imported rules: %w", err)
	}
	return &Result{Set: s, Notes: ld.notes, DetailedMetric: ld.detailed}, nil
}

// envoyLoad is the state of one Load.
type envoyLoad struct {
	opt      Options
	set      *rules.Set
	ids      map[string]bool
	domains  map[string]*envoyDomain
	notes    []string
	charged  []bool          // charged[i]: opt.ChargeAfterResponse[i] selected a rule
	detailed map[string]bool // ids of the rules with detailed_metric
}

// envoyDomain is a domain loaded so far.
type envoyDomain struct {
	file string          // the first file that named it
	n    int             // its rules so far
	top  map[string]bool // composite keys of its top-level descriptors
}

type envoyImport struct {
	*envoyLoad
	file   string
	domain string
	d      *envoyDomain
}

// envoyKeys are the keys envoyproxy/ratelimit's configuration knows, at
// any level.
var envoyKeys = []string{"domain", "key", "value", "descriptors", "rate_limit", "unit", "requests_per_unit",
	"unlimited", "shadow_mode", "quota_mode", "name", "replaces", "detailed_metric", "value_to_metric",
	"share_threshold", "metadata"}

// fail is an error at line of the file, about what (a descriptor chain).
func (im *envoyImport) fail(line int, what, msg string) error {
	if what != "" {
		msg = what + ": " + msg
	}
	if line == 0 {
		return fmt.Errorf("%s: %s", im.file, msg)
	}
	return fmt.Errorf("%s: line %d: %s", im.file, line, msg)
}

func (im *envoyImport) note(line int, what, msg string) {
	if what != "" {
		msg = what + ": " + msg
	}
	im.notes = append(im.notes, fmt.Sprintf("%s: line %d: %s", im.file, line, msg))
}

func (im *envoyImport) file1(n *doctree.Node) error {
	switch n.Kind {
	case doctree.Null:
		return im.fail(n.Line, "", "the file is empty; envoyproxy/ratelimit refuses a file without a domain: "+
			"give it domain and descriptors, or remove it")
	case doctree.Object:
	default:
		return im.fail(n.Line, "", "want a mapping with domain and descriptors, got "+n.Describe())
	}
	if err := im.checkTree(n, ""); err != nil {
		return err
	}
	im.misplaced(n, "", "domain", "descriptors")
	dom, err := im.str(n, "domain", "")
	if err != nil {
		return err
	}
	if dom == "" {
		return im.fail(n.Line, "", "domain: required, a non-empty string (envoyproxy/ratelimit refuses a file without one)")
	}
	d := im.domains[dom]
	switch {
	case d == nil:
		d = &envoyDomain{file: im.file, top: make(map[string]bool)}
		im.domains[dom] = d
	case !im.opt.MergeDomains:
		return im.fail(last(n, "domain").Line, "", fmt.Sprintf("domain %s is also the domain of %s; a domain is one file "+
			"(set MERGE_DOMAIN_CONFIG=true to merge the files of a domain)", quote.Short(dom), d.file))
	}
	im.domain, im.d = dom, d
	return im.list(n, nil, nil, d.top)
}

// checkTree refuses what envoyproxy/ratelimit refuses before it reads
// any field: a mapping key it does not know (anywhere but under
// metadata), a list item that is not a mapping, a number that is not a
// whole number of 64 bits.
func (im *envoyImport) checkTree(n *doctree.Node, what string) error {
	switch n.Kind {
	case doctree.Object:
		if k := last(n, "key"); k != nil && k.Kind != doctree.Object && k.Kind != doctree.Array {
			e := rules.Entry{Key: k.Raw}
			if v := last(n, "value"); v != nil && v.Kind != doctree.Object && v.Kind != doctree.Array {
				e.Value = v.Raw
			}
			if what != "" {
				what += " > "
			}
			what += chainString([]rules.Entry{e})
		}
		for i, k := range n.Keys {
			if !slices.Contains(envoyKeys, k.Name) {
				return im.fail(k.Line, what, fmt.Sprintf("unknown key %s; envoyproxy/ratelimit's configuration knows only %s",
					quote.Short(k.Name), strings.Join(envoyKeys, ", ")))
			}
			if k.Name == "metadata" || slices.ContainsFunc(n.Keys[i+1:], func(l doctree.Key) bool { return l.Name == k.Name }) {
				continue // free-form; or given again, and the last one counts
			}
			sub := what
			if k.Name != "descriptors" {
				sub = strings.TrimPrefix(what+": "+k.Name, ": ")
			}
			if err := im.checkTree(k.Val, sub); err != nil {
				return err
			}
		}
	case doctree.Array:
		for _, it := range n.Items {
			if it.Kind != doctree.Object {
				return im.fail(it.Line, what, "a list here holds mappings only (descriptors, or replaces' {name: ...}), got "+it.Describe())
			}
			if err := im.checkTree(it, what); err != nil {
				return err
			}
		}
	default:
		switch k, _ := yaml11(n); k {
		case "float":
			return im.fail(n.Line, what, "want a whole number, a string or true/false, got "+n.Raw+" (envoyproxy/ratelimit refuses fractional numbers)")
		case "uint64":
			return im.fail(n.Line, what, "number "+n.Raw+" out of range")
		}
	}
	return nil
}

// misplaced notes the keys of n outside want: envoyproxy/ratelimit knows
// them, and ignores them there.
func (im *envoyImport) misplaced(n *doctree.Node, what string, want ...string) {
	for _, k := range n.Keys {
		if !slices.Contains(want, k.Name) {
			im.note(k.Line, what, fmt.Sprintf("%s has no meaning here (want %s) and is ignored, as envoyproxy/ratelimit ignores it",
				quote.Short(k.Name), strings.Join(want, ", ")))
		}
	}
}

// last returns the value of n's last key name, nil when it has none:
// envoyproxy/ratelimit keeps the last of a key given twice.
func last(n *doctree.Node, name string) *doctree.Node {
	for i := len(n.Keys) - 1; i >= 0; i-- {
		if n.Keys[i].Name == name {
			return n.Keys[i].Val
		}
	}
	return nil
}

// yaml11 classifies a YAML scalar as envoyproxy/ratelimit's YAML 1.1
// reader does: "null", "bool", "int", "uint64" (beyond int64), "float" or
// "string"; for bool and int, v is its value.
func yaml11(n *doctree.Node) (kind string, v int64) {
	if !n.Plain {
		return "string", 0
	}
	switch n.Raw {
	case "", "~", "null", "Null", "NULL":
		return "null", 0
	case "y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON":
		return "bool", 1
	case "n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF":
		return "bool", 0
	case ".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF":
		return "float", 0
	}
	if c := n.Raw[0]; c == '+' || c == '-' || c == '.' || '0' <= c && c <= '9' {
		plain := strings.ReplaceAll(n.Raw, "_", "")
		if i, err := strconv.ParseInt(plain, 0, 64); err == nil {
			return "int", i
		}
		if _, err := strconv.ParseUint(plain, 0, 64); err == nil {
			return "uint64", 0
		}
		if yaml11Float.MatchString(plain) {
			return "float", 0
		}
	}
	return "string", 0
}

var yaml11Float = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)

// str reads n's string field name as envoyproxy/ratelimit reads it: any
// scalar as written, null or absent as "".
func (im *envoyImport) str(n *doctree.Node, name, what string) (string, error) {
	v := last(n, name)
	if v == nil {
		return "", nil
	}
	switch v.Kind {
	case doctree.Object, doctree.Array:
		return "", im.fail(v.Line, what, name+": want a string, got "+v.Describe())
	}
	if k, _ := yaml11(v); k == "null" {
		return "", nil
	}
	return v.Raw, nil
}

// flag reads n's true/false field name: true, yes, on (any YAML 1.1
// spelling), false when null or absent.
func (im *envoyImport) flag(n *doctree.Node, name, what string) (bool, error) {
	v := last(n, name)
	if v == nil {
		return false, nil
	}
	switch k, b := yaml11(v); {
	case v.Kind == doctree.Object || v.Kind == doctree.Array:
	case k == "null":
		return false, nil
	case k == "bool":
		return b == 1, nil
	}
	return false, im.fail(v.Line, what, name+": want true or false, got "+v.Describe())
}

// list imports the descriptors of n (its key descriptors), under chain;
// shared[i] says whether chain[i] has share_threshold; seen holds the
// composite keys of the level.
func (im *envoyImport) list(n *doctree.Node, chain []rules.Entry, shared []bool, seen map[string]bool) error {
	ds := last(n, "descriptors")
	if ds == nil || ds.Kind == doctree.Null {
		return nil
	}
	if ds.Kind != doctree.Array {
		return im.fail(ds.Line, chainString(chain), "descriptors: want a list, got "+ds.Describe())
	}
	for _, it := range ds.Items {
		if err := im.descriptor(it, chain, shared, seen); err != nil {
			return err
		}
	}
	return nil
}

func (im *envoyImport) descriptor(n *doctree.Node, parent []rules.Entry, pshared []bool, seen map[string]bool) error {
	var e rules.Entry
	var err error
	if e.Key, err = im.str(n, "key", chainString(parent)); err != nil {
		return err
	}
	if e.Value, err = im.str(n, "value", chainString(parent)); err != nil {
		return err
	}
	chain := append(append([]rules.Entry(nil), parent...), e)
	what := chainString(chain)
	if e.Key == "" {
		return im.fail(n.Line, what, "key: required, a non-empty string")
	}
	im.misplaced(n, what, "key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode", "detailed_metric",
		"value_to_metric", "share_threshold", "metadata")
	composite := e.Key
	if e.Value != "" {
		composite += "_" + e.Value
	}
	if seen[composite] {
		return im.fail(n.Line, what, fmt.Sprintf("a descriptor of this level already has key and value %s "+
			"(envoyproxy/ratelimit's composite key key_value; key a_b alone is the same as key a, value b): remove one", quote.Short(composite)))
	}
	seen[composite] = true
	var f envoyFlags
	var share bool
	for _, b := range []struct {
		name string
		dst  *bool
	}{{"shadow_mode", &f.shadow}, {"detailed_metric", &f.detailed}, {"value_to_metric", &f.valueToMetric},
		{"share_threshold", &share}, {"quota_mode", &f.quota}} {
		if *b.dst, err = im.flag(n, b.name, what); err != nil {
			return err
		}
	}
	if v := last(n, "metadata"); v != nil && v.Kind != doctree.Null && v.Kind != doctree.Object {
		return im.fail(v.Line, what, "metadata: want a mapping, got "+v.Describe())
	}
	if share && !strings.Contains(composite, "*") {
		return im.fail(last(n, "share_threshold").Line, what, "share_threshold: only on a wildcard value (one containing \"*\"); remove share_threshold or make the value a wildcard")
	}
	shared := append(append([]bool(nil), pshared...), share)
	rl, ds := last(n, "rate_limit"), last(n, "descriptors")
	switch {
	case rl != nil && rl.Kind != doctree.Null:
		if err := im.limit(rl, chain, shared, f); err != nil {
			return err
		}
	case ds == nil || ds.Kind == doctree.Null || ds.Kind == doctree.Array && len(ds.Items) == 0:
		// No limit and nothing nested: envoyproxy/ratelimit matches the
		// descriptor and applies no limit, so a less specific one must
		// not apply either.
		if err := im.add(n.Line, chain, shared, f, rules.Rule{Unlimited: true}, "no rate_limit"); err != nil {
			return err
		}
	}
	return im.list(n, chain, shared, make(map[string]bool))
}

// envoyFlags are a descriptor's flags that pass to its rule.
type envoyFlags struct {
	shadow, quota, detailed, valueToMetric bool
}

// envoyUnitNames lists the units for messages.
const envoyUnitNames = "second, minute, hour, day, week, month, year (any letter case)"

func (im *envoyImport) limit(n *doctree.Node, chain []rules.Entry, shared []bool, f envoyFlags) error {
	what := chainString(chain)
	if n.Kind != doctree.Object {
		return im.fail(n.Line, what, "rate_limit: want {unit, requests_per_unit}, got "+n.Describe())
	}
	im.misplaced(n, what+": rate_limit", "unit", "requests_per_unit", "unlimited", "name", "replaces")
	var r rules.Rule
	var err error
	if r.Name, err = im.str(n, "name", what+": rate_limit"); err != nil {
		return err
	}
	unit, err := im.str(n, "unit", what+": rate_limit")
	if err != nil {
		return err
	}
	window, validUnit := envoyUnits[strings.ToLower(unit)]
	if r.Unlimited, err = im.flag(n, "unlimited", what+": rate_limit"); err != nil {
		return err
	}
	var limit int64
	if v := last(n, "requests_per_unit"); v != nil {
		k, i := yaml11(v)
		switch {
		case k == "null":
		case k != "int" || v.Kind == doctree.Object || v.Kind == doctree.Array:
			return im.fail(v.Line, what, "rate_limit.requests_per_unit: want a whole number from 0 to 4294967295, got "+v.Describe())
		case i < 0 || i > 1<<32-1:
			return im.fail(v.Line, what, fmt.Sprintf("rate_limit.requests_per_unit: want a whole number from 0 to 4294967295, got %s", v.Raw))
		default:
			limit = i
		}
	}
	switch {
	case r.Unlimited && validUnit:
		return im.fail(last(n, "unit").Line, what, "rate_limit.unit: an unlimited rate_limit takes no unit; remove unit or unlimited")
	case !r.Unlimited && unit == "":
		return im.fail(n.Line, what, "rate_limit.unit: required, one of "+envoyUnitNames+" (or unlimited: true)")
	case !r.Unlimited && !validUnit:
		return im.fail(last(n, "unit").Line, what, fmt.Sprintf("rate_limit.unit: want one of %s, got %s", envoyUnitNames, quote.Short(unit)))
	}
	if v := last(n, "replaces"); v != nil && v.Kind != doctree.Null {
		if v.Kind != doctree.Array {
			return im.fail(v.Line, what, "rate_limit.replaces: want a list of {name: <rate_limit name>}, got "+v.Describe())
		}
		for _, it := range v.Items {
			im.misplaced(it, what+": rate_limit.replaces", "name")
			name, err := im.str(it, "name", what+": rate_limit.replaces")
			if err != nil {
				return err
			}
			switch {
			case name == "":
				return im.fail(it.Line, what, "rate_limit.replaces: name: required, the name of the rate_limit to replace")
			case name == r.Name:
				return im.fail(it.Line, what, fmt.Sprintf("rate_limit.replaces: %s is this rate_limit's own name; remove it", quote.Short(name)))
			}
			r.Replaces = append(r.Replaces, name)
		}
	}
	if r.Unlimited {
		return im.add(n.Line, chain, shared, f, r, "unlimited")
	}
	r.Limit, r.Window, r.Algorithm = limit, rules.Duration(window), algorithm.FixedWindow
	return im.add(n.Line, chain, shared, f, r, "")
}

// add completes r, the rule of the descriptor chain at line — its id,
// description, match, key and flags — checks it and adds it to the rules.Set.
// note, when not "", goes in the description.
func (im *envoyImport) add(line int, chain []rules.Entry, shared []bool, f envoyFlags, r rules.Rule, note string) error {
	what := chainString(chain)
	im.d.n++
	id := ""
	if ruleid.Valid(r.Name) && !im.ids[r.Name] {
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
		if base == "" || !('a' <= base[0] && base[0] <= 'z' || '0' <= base[0] && base[0] <= '9') {
			base = "d" + base
		}
		suffix := "." + strconv.Itoa(im.d.n)
		if len(base)+len(suffix) > ruleid.MaxLen {
			base = base[:ruleid.MaxLen-len(suffix)]
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
	r.Match = rules.Match{Domain: im.domain, Entries: chain}
	r.By = rules.ByGlobal
	r.Shadow = f.shadow || im.opt.Shadow
	r.Quota = f.quota || im.opt.Quota
	if !r.Unlimited {
		for i, sel := range im.opt.ChargeAfterResponse {
			if sel.selects(im.domain, chain) {
				r.Charge, im.charged[i] = rules.ChargeAfterResponse, true
			}
		}
	}
	for _, x := range []struct {
		on   bool
		text string
	}{{note != "", note}, {f.detailed, "detailed_metric"}, {f.valueToMetric, "value_to_metric"}} {
		if x.on {
			r.Description += " (" + x.text + ")"
		}
	}
	if len(by) > 0 {
		r.By = rules.By(strings.Join(by, "+"))
	}
	if len(by) > rulekey.MaxParts {
		return im.fail(line, what, fmt.Sprintf("%d entries without a fixed value; sluice keys a rule by at most %d", len(by), rulekey.MaxParts))
	}
	if err := r.Validate(); err != nil {
		return im.fail(line, what, err.Error())
	}
	if f.detailed && !r.Unlimited {
		if im.detailed == nil {
			im.detailed = make(map[string]bool)
		}
		im.detailed[r.ID] = true
	}
	im.set.Rules = append(im.set.Rules, r)
	return nil
}

// chainString renders a descriptor chain: `domain "rl", foo > bar=banned`.
func chainString(chain []rules.Entry) string {
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
