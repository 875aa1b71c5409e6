package rules

import (
	"net/http"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/identity"
	"github.com/sluicehq/sluice/internal/rulekey"
	"github.com/sluicehq/sluice/internal/urlpath"
)

// Compiled is a rule made ready for the hot path, with what the decision
// and its headers need precomputed. Compile makes them; they are read-only
// once built and safe for concurrent use: share the pointer, never modify
// through it.
type Compiled struct {
	Rule       // a copy of the rule
	Seq    int // position in Set.Rules
	Params algorithm.Params
	// WindowSeconds is the window in whole seconds, rounded up, at least 1.
	WindowSeconds int64
	// Key is the rule's By, parsed: what its buckets are keyed by. Its
	// parts are sluice's own type, for the limiter; By says the same.
	Key []rulekey.Part
	// callerKey: Key is one part naming the caller (KeyedByCaller).
	callerKey bool
	// failClosed is FailureMode == FailClosed, set by Compile; failSet
	// says it is (FailsClosed).
	failClosed, failSet bool

	method string // the endpoint's method or method set ("GET|HEAD"), "*" for any
	// methods are the bits of the known methods the rule fits (methodBit);
	// otherMethod: it names another, which methodFits tests.
	methods     uint16
	otherMethod bool
	path        string // the key it is indexed under (clean; in lower case for path_case insensitive): the exact path or prefix base; "" for any path
	// headers are the rule's match.headers, the one it is indexed by first
	// (see compileHeaders); more the others, which Match checks.
	headers []headerCond
	more    []headerCond
}

// Index is a compiled Set: it finds the rules that apply to a call in time
// that does not grow with the number of rules. Rules with an endpoint are
// kept in one map by path (the exact path, or the base of a prefix pattern,
// "/api" for "/api/*", each made clean with urlpath.Clean), and under each path
// by plan; rules for any path are kept by plan. A call looks up its own
// clean path and, for prefix rules, each part of it before a "/" (only for
// lengths some prefix base has); every list is in set order and filtered
// by method as it is read. Rules with match.path_case insensitive are kept
// in a second such map, by their path in lower case, and looked up with the
// call's path in lower case.
//
// Rules with match.headers are kept apart, by one of their headers: for
// each header name, by its exact value or its prefix, in an index of their
// own by plan and path as above. A call looks up the first value of each
// header name some rule is indexed by, then each of that value's lengths
// some prefix has, and checks the rule's other headers as it reads the
// lists. So matching costs a few map lookups per header name the rules
// use, however many values they name.
//
// Rules that name an Envoy domain (Match.Domain) are not in these lists:
// Match, used by the HTTP decision API, never sees them. Each domain named
// by some rule has its own view, an Index holding that domain's rules and
// every rule with no domain (see Domain), so that matching costs the same
// with or without domains.
//
// An Index is immutable once built and safe for concurrent use. The zero
// value, and a nil *Index, hold no rules and no clients.
type Index struct {
	set   *Set
	rules []*Compiled
	byID  map[string]*Compiled
	// domains maps each domain some enabled rule names to its view, nil
	// when no rule names a domain; root is the Index a view belongs to, nil
	// in that Index.
	domains map[string]*Index
	root    *Index
	// plans holds every plan the Set names: in a rule's match (enabled or
	// not, any domain), in the client registry, and the default plan.
	plans map[string]struct{}

	matcher            // rules without match.entries
	entries *entryNode // rules with match.entries (Envoy descriptors), see MatchEntries
	// needPath: some rule of the view has an endpoint with a path.
	needPath bool
	// replaces: some rule of the Set replaces others (Rule.Replaces).
	replaces bool
}

// matcher holds rules by plan and path (an Index's, and under each header
// value of a headerIndex).
type matcher struct {
	anyPath []*Compiled            // no plan, any path
	planAny map[string][]*Compiled // by plan, any path
	// defaultAny is planAny[defaultPlan], the list most calls want: match
	// finds it without hashing the plan. Set in an Index's own matcher.
	defaultPlan string
	defaultAny  []*Compiled
	paths       pathIndex      // rules with an endpoint, by path or prefix base
	folded      pathIndex      // the same for path_case insensitive rules, by path in lower case
	headers     []*headerIndex // rules with match.headers, by the name of their first header (Compiled.headers)
}

// call is what Match compares: the call's plan, method, clean path and
// headers.
type call struct {
	plan, method, path string
	mbit               uint16 // methodBit(method)
	header             http.Header
	// counting: the overlap count, which takes a rule with headers to fit
	// when the header it is indexed by does (an upper bound).
	counting bool
}

// pathIndex holds rules with an endpoint by path or prefix base.
type pathIndex struct {
	m    map[string]*pathRules
	lens [maxEndpoint / 64]uint64 // the lengths of prefix bases
}

// pathRules holds the enabled rules whose endpoint names one path: exact
// patterns for that path and prefix patterns with that base.
type pathRules struct {
	lists                     // rules without a plan
	plans   []planLists       // rules with a plan, few per path
	planMap map[string]*lists // the same, when there are many
}

type lists struct{ exact, prefix []*Compiled }

type planLists struct {
	plan string
	lists
}

// manyPlans is the number of plans on one path beyond which a map beats a
// linear scan.
const manyPlans = 8

// Compile validates s (returning Validate's error) and builds its Index.
// The Index keeps its own deep copy of s.
func Compile(s *Set) (*Index, error) {
	if err := s.validateFields(); err != nil {
		return nil, err
	}
	ix := build(s)
	if err := ix.checkOverlap(); err != nil {
		return nil, err
	}
	return ix, nil
}

// build makes the Index of s, a Set whose fields are valid.
func build(s *Set) *Index {
	s = s.Clone()
	ix := &Index{
		set:   s,
		rules: make([]*Compiled, len(s.Rules)),
		byID:  make(map[string]*Compiled, len(s.Rules)),
		plans: namedPlans(s),
	}
	all := make([]Compiled, len(s.Rules))
	for i := range s.Rules {
		c := &all[i]
		c.Rule = s.Rules[i]
		if c.Enabled != nil {
			e := *c.Enabled
			c.Enabled = &e // not shared with ix.set
		}
		c.Seq = i
		c.Params = c.Rule.Params()
		c.Key, _ = parseBy(c.By) // valid: the Set was validated
		c.callerKey = len(c.Key) == 1 && c.Key[0].Caller()
		c.failClosed, c.failSet = c.FailureMode == FailClosed, true
		ix.replaces = ix.replaces || len(c.Replaces) > 0
		c.WindowSeconds = max((c.Params.Window+999_999)/1_000_000, 1)
		ix.rules[i] = c
		ix.byID[c.ID] = c
		if !c.IsEnabled() {
			continue
		}
		if d := c.Match.Domain; d != "" {
			if ix.domains == nil {
				ix.domains = make(map[string]*Index)
			}
			ix.domains[d] = nil // built below
			continue
		}
		ix.add(c)
	}
	ix.finish()
	for d := range ix.domains {
		v := &Index{set: ix.set, rules: ix.rules, byID: ix.byID, root: ix, plans: ix.plans, replaces: ix.replaces}
		for _, c := range ix.rules {
			if c.IsEnabled() && (c.Match.Domain == "" || c.Match.Domain == d) {
				v.add(c)
			}
		}
		v.finish()
		ix.domains[d] = v
	}
	return ix
}

// finish builds the plan maps of paths with many plans, once every rule is
// added.
func (ix *Index) finish() {
	if ix.set != nil && ix.set.DefaultPlan != "" {
		ix.defaultPlan = ix.set.DefaultPlan
		ix.defaultAny = ix.planAny[ix.defaultPlan]
	}
	ix.needPath = ix.matcher.finish()
}

// finish is Index.finish for m and the matchers under it; it reports
// whether some rule among them has a path.
func (m *matcher) finish() bool {
	m.paths.finish()
	m.folded.finish()
	need := m.paths.m != nil || m.folded.m != nil
	for _, hi := range m.headers {
		for _, sub := range hi.exact {
			need = sub.finish() || need
		}
		for _, sub := range hi.prefix {
			need = sub.finish() || need
		}
	}
	return need
}

func (pi *pathIndex) finish() {
	for _, pr := range pi.m {
		if len(pr.plans) > manyPlans {
			pr.planMap = make(map[string]*lists, len(pr.plans))
			for i := range pr.plans {
				pr.planMap[pr.plans[i].plan] = &pr.plans[i].lists
			}
		}
	}
}

// Domain returns the view of the rules that apply to calls in the Envoy
// rate limit domain d: the enabled rules whose match names d and those that
// name no domain. For d == "" and for a domain no enabled rule names, that
// is the rules with no domain, the Index Compile returned. A view shares
// Set, Rules, Rule, Plan and Revision with that Index. Domain does not
// allocate.
func (ix *Index) Domain(d string) *Index {
	if ix == nil {
		return nil
	}
	root := ix
	if ix.root != nil {
		root = ix.root
	}
	if v := root.domains[d]; v != nil {
		return v
	}
	return root
}

// Domains returns the domains some enabled rule names, sorted.
func (ix *Index) Domains() []string {
	if ix == nil {
		return nil
	}
	if ix.root != nil {
		ix = ix.root
	}
	return sortedKeys(ix.domains)
}

// add indexes c, the enabled rule with the highest Seq so far.
func (ix *Index) add(c *Compiled) {
	if len(c.Match.Entries) > 0 {
		ix.addEntries(c)
		return
	}
	e := endpointPattern{Method: "*", Prefix: true} // no endpoint: any call
	if c.Match.Endpoint != "" {
		e, _ = parseEndpoint(c.Match.Endpoint) // valid: the Set was validated
	}
	c.method = e.Method
	c.methods, c.otherMethod = methodMask(e.Method)
	path := urlpath.Clean(e.Path)
	if e.Prefix && path == "/" {
		path = "" // "/*", "//*", "/./*": every path
	}
	if c.Match.PathCase == PathCaseInsensitive {
		path = string(urlpath.AppendLower(nil, path))
	}
	c.path = path
	m := &ix.matcher
	if len(c.Match.Headers) > 0 {
		if c.headers == nil {
			c.headers = compileHeaders(c.Match.Headers)
			if len(c.headers) > 1 {
				c.more = c.headers[1:]
			}
		}
		m = m.headerIndex(c.headers[0].name).matcherFor(&c.headers[0])
	}
	m.add(c, path, e.Prefix)
}

// headerIndex returns the index of rules by header name (canonical),
// made if need be.
func (m *matcher) headerIndex(name string) *headerIndex {
	for _, hi := range m.headers {
		if hi.name == name {
			return hi
		}
	}
	hi := &headerIndex{name: name}
	m.headers = append(m.headers, hi)
	return hi
}

// add indexes c, whose clean path key is path (a prefix base when prefix).
func (m *matcher) add(c *Compiled, path string, prefix bool) {
	if prefix && path == "" {
		if c.Match.Plan == "" {
			m.anyPath = append(m.anyPath, c)
			return
		}
		if m.planAny == nil {
			m.planAny = make(map[string][]*Compiled)
		}
		m.planAny[c.Match.Plan] = append(m.planAny[c.Match.Plan], c)
		return
	}
	pi := &m.paths
	if c.Match.PathCase == PathCaseInsensitive {
		pi = &m.folded
	}
	pi.add(c, path, prefix)
}

func (pi *pathIndex) add(c *Compiled, path string, prefix bool) {
	pr := child(&pi.m, path)
	l := &pr.lists
	if c.Match.Plan != "" {
		l = nil
		for i := range pr.plans {
			if pr.plans[i].plan == c.Match.Plan {
				l = &pr.plans[i].lists
			}
		}
		if l == nil {
			pr.plans = append(pr.plans, planLists{plan: c.Match.Plan})
			l = &pr.plans[len(pr.plans)-1].lists
		}
	}
	if prefix {
		l.prefix = append(l.prefix, c)
		n := len(path) // < maxEndpoint
		pi.lens[n/64] |= 1 << (n % 64)
	} else {
		l.exact = append(l.exact, c)
	}
}

// child returns the node under key k of the index map *m, first making the
// map and a new node if need be.
func child[N any](m *map[string]*N, k string) *N {
	if *m == nil {
		*m = make(map[string]*N)
	}
	n := (*m)[k]
	if n == nil {
		n = new(N)
		(*m)[k] = n
	}
	return n
}

// Replaces reports whether some rule of the Set, enabled or not, names
// others in Rule.Replaces: when none does, a call's matching rules all
// apply.
func (ix *Index) Replaces() bool { return ix != nil && ix.replaces }

// KeyedByCaller reports whether the rule's buckets are keyed by one
// identity of the caller (client, user, api_key or ip), which is most
// rules. It is false for a Compiled that Compile did not make.
func (c *Compiled) KeyedByCaller() bool { return c.callerKey }

// FailsClosed reports whether the rule's FailureMode is FailClosed.
func (c *Compiled) FailsClosed() bool {
	if c.failSet {
		return c.failClosed
	}
	return c.FailureMode == FailClosed
}

// Set returns the Set the index was built from. Callers must not modify it;
// Clone it to make changes.
func (ix *Index) Set() *Set {
	if ix == nil {
		return nil
	}
	return ix.set
}

// Revision returns the revision of the Set.
func (ix *Index) Revision() int64 {
	if ix == nil || ix.set == nil {
		return 0
	}
	return ix.set.Revision
}

// Rules returns every rule, enabled or not, in set order. Callers must not
// modify the slice.
func (ix *Index) Rules() []*Compiled {
	if ix == nil {
		return nil
	}
	return ix.rules
}

// Rule returns the rule with the given id, enabled or not.
func (ix *Index) Rule(id string) (*Compiled, bool) {
	if ix == nil {
		return nil, false
	}
	c, ok := ix.byID[id]
	return c, ok
}

// planFor returns the plan of the first of the given client ids that is in
// the Set's Clients, else the DefaultPlan (which may be ""). The arguments
// are full client ids ("user:alice", "api_key:k", "ip:203.0.113.7") in the
// order user, API key, IP; empty ones are skipped.
func (ix *Index) planFor(user, apiKey, ip string) string {
	if ix == nil || ix.set == nil {
		return ""
	}
	if len(ix.set.Clients) > 0 {
		for _, id := range [...]string{user, apiKey, ip} {
			if id == "" {
				continue
			}
			if c, ok := ix.set.Clients[id]; ok {
				return c.Plan
			}
		}
	}
	return ix.set.DefaultPlan
}

// Plan returns the plan a call is decided under, its effective plan:
// requested when the Set names that plan (a rule's match, enabled or not,
// a client of the registry, or the default plan), else the plan of the
// first of the client ids user, apiKey, ip ("user:alice", "api_key:k",
// "ip:203.0.113.7"; empty ones skipped) that is in the Set's Clients, else
// the DefaultPlan (which may be ""). A plan nobody defined — "zzz", "FREE"
// where only "free" is named, "free." — is thus the plan the caller would
// have without one, so that it cannot skip the rules of its plan. Plan
// names compare exactly. Plan does not allocate.
func (ix *Index) Plan(requested, user, apiKey, ip string) string {
	if requested != "" && ix.knownPlan(requested) {
		return requested
	}
	return ix.planFor(user, apiKey, ip)
}

// RegisteredAPIKey reports whether the client id of key ("api_key:<key>",
// or "api_key:h:<hex>" for a key kept as its digest, see package identity)
// is in the client registry. Entry points take an API key as the caller
// only when it is: an unknown key is ignored, so that inventing keys
// cannot buy fresh buckets. "" never is.
func (ix *Index) RegisteredAPIKey(key string) bool {
	if key == "" || ix == nil || ix.set == nil || len(ix.set.Clients) == 0 {
		return false
	}
	var buf [identity.MaxID]byte
	b := identity.AppendAPIKey(buf[:0], key)
	_, ok := ix.set.Clients[string(b)] // no allocation: the compiler looks up b in place
	return ok
}

// RegisteredID reports whether the client id id ("api_key:k_live_42") is
// in the client registry. It does not allocate.
func (ix *Index) RegisteredID(id string) bool {
	if id == "" || ix == nil || ix.set == nil || len(ix.set.Clients) == 0 {
		return false
	}
	_, ok := ix.set.Clients[id]
	return ok
}

// knownPlan reports whether the Set names plan p: in a rule's match
// (enabled or not, any domain), in the client registry, or as the default
// plan. "" is never a known plan.
func (ix *Index) knownPlan(p string) bool {
	if ix == nil || p == "" {
		return false
	}
	_, ok := ix.plans[p]
	return ok
}

// namedPlans returns the plans s names (see knownPlan).
func namedPlans(s *Set) map[string]struct{} {
	m := make(map[string]struct{})
	for i := range s.Rules {
		if p := s.Rules[i].Match.Plan; p != "" {
			m[p] = struct{}{}
		}
	}
	for _, c := range s.Clients {
		if c.Plan != "" {
			m[c.Plan] = struct{}{}
		}
	}
	if s.DefaultPlan != "" {
		m[s.DefaultPlan] = struct{}{}
	}
	return m
}
