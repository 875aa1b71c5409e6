// Package limiter decides calls: it matches a call against the rules in force,
// takes from every matching rule's bucket in one atomic store operation, and
// folds the per-rule results into one Decision.
//
//	request → identity → rules (Index.Match) → limiter → store (Take) → Decision
package limiter

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/identity"
	"github.com/sluicehq/sluice/internal/restrict"
	"github.com/sluicehq/sluice/internal/rulekey"
	"github.com/sluicehq/sluice/internal/seam/descriptor"
	"github.com/sluicehq/sluice/internal/seam/dryrun"
	"github.com/sluicehq/sluice/internal/seam/everyresult"
	"github.com/sluicehq/sluice/rules"
)

// MaxRulesPerCall bounds the rules one call is checked against: the buckets
// one atomic store operation takes. rules.Compile refuses a rule set in
// which an HTTP call could match more. A call can still match more through
// what it brings itself on sluice's Envoy API — a descriptor's own limit
// or rules on its descriptor entries — next to rules that already fill a
// decision: such a call is denied, reason algorithm.ReasonTooManyRules,
// and takes nothing (see Check).
const MaxRulesPerCall = 32

// Errors returned by Check.
var (
	// ErrNoRules: the limiter has no rule set yet (SetRules not called).
	ErrNoRules = errors.New("limiter: no rules loaded")
	// ErrTooManyRules: a Store was given more than MaxRulesPerCall ops.
	// Check, CheckMany and Reserve never return it for a call that matches
	// more rules: they deny it (algorithm.ReasonTooManyRules).
	ErrTooManyRules = errors.New("limiter: call matches too many rules")
)

// Request is one call to decide. User, APIKey and IP identify the caller (at
// least one should be set), each as the call gave it. APIKey is a caller
// only when the rules' client registry holds its client id
// (rules.Index.RegisteredAPIKey); an unregistered key is ignored, so that
// inventing keys cannot buy fresh buckets (a caller a service
// authenticated itself is a User). The limiter builds
// the client ids with package identity (a value that is too long or odd is
// keyed by its digest, an IPv6 address by its prefix, an IP in brackets or
// with a port as the address). Method and Path name the endpoint as the
// call gave it, query included or not: rules compare the clean path
// (see Paths in package rules). Plan is the call's plan when the rules name it (a
// rule, a client or the default plan), else — empty, or a plan nobody
// defined — the plan comes from the client registry or the default plan
// (rules.Index.Plan); Cost 0 means 1. Peek checks without taking: every
// rule is applied with cost 0 (algorithm.Apply), which reads each bucket
// and takes nothing.
//
// Header is what rules keyed by header:<name> read (see rules.ByGlobal): the
// HTTP request's headers (gateway, middleware); it may be nil. Rules on
// Envoy descriptor entries apply only through sluice's Envoy API.
type Request struct {
	User, APIKey, IP string
	Plan             string
	Method, Path     string
	Cost             int64
	Peek             bool
	Header           http.Header

	// desc is the Envoy descriptor of the call, nil for any other
	// caller (set through internal/seam/descriptor).
	desc *descriptor.Descriptor
}

func init() {
	descriptor.Attach = func(req any, d *descriptor.Descriptor) { req.(*Request).desc = d }
}

// own returns the call's own limit (descriptor.Descriptor.Own), nil when
// it has none.
func (r *Request) own() *rules.Compiled {
	if r.desc == nil {
		return nil
	}
	return r.desc.Own
}

// dry returns the recorder of a dry run of the call
// (descriptor.Descriptor.Dry), nil for a real call.
func (r *Request) dry() *dryrun.Recorder {
	if r.desc == nil {
		return nil
	}
	return r.desc.Dry
}

// entries returns the call's descriptor entries, nil when it has none.
func (r *Request) entries() []rules.Entry {
	if r.desc == nil {
		return nil
	}
	return r.desc.Entries
}

// Decision is the answer for one call. Limit, Remaining, ResetAfter and the
// policy fields describe the most restrictive matching rule: the one that
// denied (the longest wait, if several did), else the one with the least
// remaining. When no rule matched, Allowed is true and Rule is nil. A call
// that matches more than MaxRulesPerCall rules is denied with Rule nil,
// Reason algorithm.ReasonTooManyRules, Limit, Remaining and RetryAfter 0.
type Decision struct {
	Allowed    bool
	Reason     algorithm.Reason // why it was denied
	Limit      int64
	Remaining  int64
	ResetAfter time.Duration // until the quota is whole again
	RetryAfter time.Duration // 0 when allowed or when it can never pass
	Now        time.Time     // the store's clock at the decision

	Rule    *rules.Compiled // most restrictive rule, nil when none matched
	KeyedBy rules.By        // what its bucket is keyed by: user, api_key or ip, else the rule's by (global, endpoint, …)
	Plan    string          // the effective plan the call was matched under (rules.Index.Plan)

	Matched      int    // rules applied
	ShadowDenied string // id of a shadow rule that would have denied, if any
	// Unlimited: an unlimited rule applied (rules.Rule.Unlimited). It
	// counts and limits nothing: with no other rule, Rule is nil and the
	// call is allowed as when no rule matched.
	Unlimited bool

	// Origin says where the decision came from: the store, the local denial
	// cache, or — degraded, the shared store being unavailable — the local
	// fallback or a fail-closed denial.
	Origin Origin
}

// RuleID is the id of the most restrictive rule, "" when none matched.
func (d *Decision) RuleID() string {
	if d.Rule == nil {
		return ""
	}
	return d.Rule.ID
}

// Config tunes a Limiter.
type Config struct {
	// IPv6Prefix is the prefix length IPv6 callers are keyed by. Default 64:
	// one host commonly holds a whole /64, so keying by /128 would let it
	// pick a fresh bucket per call.
	IPv6Prefix int
}

// Limiter decides calls against the rules in force. Rules are swapped in
// atomically with SetRules while calls are decided. Safe for concurrent use;
// use New.
type Limiter struct {
	store   Store
	cfg     Config
	rules   atomic.Pointer[rules.Index]
	scratch sync.Pool
}

// New returns a limiter over store with no rules (Check fails with
// ErrNoRules until SetRules).
func New(store Store, cfg Config) *Limiter {
	if cfg.IPv6Prefix <= 0 || cfg.IPv6Prefix > 128 {
		cfg.IPv6Prefix = identity.DefaultIPv6Prefix
	}
	l := &Limiter{store: store, cfg: cfg}
	l.scratch.New = func() any { return new(scratch) }
	return l
}

// SetRules puts ix in force for every call that starts after it returns.
func (l *Limiter) SetRules(ix *rules.Index) { l.rules.Store(ix) }

// Rules returns the rules in force (nil before the first SetRules).
func (l *Limiter) Rules() *rules.Index { return l.rules.Load() }

// scratch is the per-call working memory, pooled so Check does not allocate.
type scratch struct {
	ids     [3 * identity.MaxID]byte // client ids, built in place
	user    string                   // the client ids in ids
	apiKey  string
	ip      string
	plan    string                         // the effective plan
	keys    [MaxRulesPerCall * maxKey]byte // bucket ids of rules keyed by more than the caller
	matched [MaxRulesPerCall]*rules.Compiled
	ops     [MaxRulesPerCall]Op
	res     [MaxRulesPerCall]algorithm.Result
	used    [MaxRulesPerCall]*rules.Compiled // the rule of each op
	own     *rules.Compiled                  // the call's own limit (its descriptor's), if any
	kept    []*rules.Compiled                // the matched rules that apply, after replaces (in matched)
	at      [MaxRulesPerCall]int             // CheckMany: each op's bucket in the one take
	in      keyInput                         // what rules keyed by more than the caller read
	ep      [maxEndpoint]byte                // the call's endpoint as keys name it (keyInput.endpoint)
	epFold  [maxEndpoint]byte                // the same in lower case (keyInput.folded)
}

// Check decides req: every enabled rule matching the call's plan and
// endpoint applies, and the call passes only if all of them allow; a denied
// call consumes nothing. Shadow rules are evaluated and consumed like the
// others but never deny. A rule whose name another matching rule replaces
// does not apply; an unlimited rule applies but takes nothing; a rule of
// limit 0 denies (reason cost_exceeds_capacity, remaining 0, reset at the
// end of its current window, aligned to the epoch). A call that matches
// more than MaxRulesPerCall rules — which one atomic take cannot apply —
// is denied and takes nothing (see tooMany): it fails closed, never with
// an error an entry point could turn into "allow".
func (l *Limiter) Check(ctx context.Context, req *Request) (d Decision, err error) {
	ix := l.rules.Load()
	if ix == nil {
		return Decision{}, ErrNoRules
	}
	if rec := req.dry(); rec != nil {
		return l.checkDry(ctx, ix, req, rec)
	}
	sc := l.scratch.Get().(*scratch)
	// d is built in place, the result itself.
	ops, err := l.plan(ix, req, sc, &d)
	switch {
	case err == nil && len(ops) > 0:
		var info TakeInfo
		if info, err = l.store.Take(ctx, ops, sc.res[:len(ops)]); err == nil {
			fold(&d, sc, len(ops), info)
		}
	case errors.Is(err, ErrTooManyRules):
		d, err = tooMany(sc), nil
	}
	l.scratch.Put(sc)
	if err != nil {
		return Decision{}, err
	}
	return d, nil
}

// CheckMany decides several calls at once, all or nothing: each request is
// planned as Check plans it — except that a rule a matching rule of any of
// the requests replaces applies to none of them, as envoyproxy/ratelimit
// replaces across the descriptors of one request — the buckets of all are taken in one store
// operation (a bucket several requests name is taken once, for the sum of
// their costs), and ds[i] is the decision of reqs[i], folded as Check folds
// it from the results of its own rules. A denial consumes nothing — unless
// the requests name more than MaxRulesPerCall buckets together: they are
// then taken in atomic steps of MaxRulesPerCall, and a step that denies
// gives back nothing the other steps took. The buckets of a step that
// denied report the Remaining they hold, those that would have allowed
// too: not what would remain had the call passed (see asItStands). A request that matches more
// than MaxRulesPerCall rules is denied as Check denies it, and the others
// are then only read (Request.Peek): a denial consumes nothing. Every
// request is decided under the same rules. ds must be at least as long as
// reqs.
func (l *Limiter) CheckMany(ctx context.Context, reqs []Request, ds []Decision) error {
	ix := l.rules.Load()
	if ix == nil {
		return ErrNoRules
	}
	ds = ds[:len(reqs)]
	scs := make([]*scratch, len(reqs))
	defer func() {
		for _, sc := range scs {
			if sc != nil {
				l.scratch.Put(sc)
			}
		}
	}()
	type bucket struct{ client, rule string }
	var (
		all  []Op
		keys map[bucket]int
		n    = make([]int, len(reqs)) // ops of each request
	)
	matched := make([][]*rules.Compiled, len(reqs))
	var every []*rules.Compiled       // the rules each request matched, for replaces
	denied := make([]bool, len(reqs)) // the requests that match too many rules
	over := false                     // some request does
	for i := range reqs {
		sc := l.scratch.Get().(*scratch)
		scs[i] = sc
		m, err := l.match(ix, &reqs[i], sc)
		if errors.Is(err, ErrTooManyRules) {
			over, denied[i] = true, true
			ds[i] = tooMany(sc)
			continue
		}
		if err != nil {
			return err
		}
		matched[i] = m
		every = append(every, m...)
	}
	for i := range reqs {
		sc := scs[i]
		if denied[i] {
			continue // decided above
		}
		req := &reqs[i]
		if over { // the call is denied: the others are read, not taken
			peek := *req
			peek.Peek = true
			req = &peek
		}
		ds[i] = Decision{}
		sc.kept = dropReplaced(matched[i], every)
		ops := l.ops(req, sc, sc.kept, &ds[i])
		n[i] = len(ops)
		if keys == nil && len(ops) > 0 {
			keys = make(map[bucket]int, len(reqs)*len(ops))
		}
		// The ops' client ids live in sc.ids, sc.keys and sc.ep, held until the end.
		for j := range ops {
			op := &ops[j]
			k := bucket{op.Client, op.Rule}
			at, ok := keys[k]
			if ok {
				all[at].Cost += op.Cost
			} else {
				at = len(all)
				keys[k] = at
				all = append(all, *op)
			}
			sc.at[j] = at
		}
	}
	var rec *dryrun.Recorder
	if len(reqs) > 0 {
		rec = reqs[0].dry()
	}
	var raw []algorithm.Result // a dry run's reads
	if rec != nil {
		raw = make([]algorithm.Result, len(all))
		defer func() { rec.Explained = explainMany(scs, n, denied, ds, raw) }()
	}
	if len(all) == 0 {
		return nil
	}
	res := make([]algorithm.Result, len(all))
	var info TakeInfo
	if len(reqs) > 1 {
		ctx = everyresult.With(ctx) // each request's decision is its own buckets'
	}
	for start := 0; start < len(all); start += MaxRulesPerCall {
		end := min(start+MaxRulesPerCall, len(all))
		var step TakeInfo
		var err error
		if rec != nil {
			step, err = l.read(ctx, all[start:end], res[start:end], raw[start:end])
		} else {
			step, err = l.store.Take(ctx, all[start:end], res[start:end])
		}
		if err != nil {
			return err
		}
		info.Now = max(info.Now, step.Now)
		info.Origin = max(info.Origin, step.Origin) // the most degraded
		asItStands(all[start:end], res[start:end])
	}
	for i, sc := range scs {
		if n[i] == 0 {
			continue
		}
		for j := range n[i] {
			sc.res[j] = res[sc.at[j]]
		}
		fold(&ds[i], sc, n[i], info)
	}
	return nil
}

// asItStands turns the results of a step of CheckMany that some op denied
// — it took nothing but its charges — into what its buckets hold: each
// other op that allowed reports the Remaining of its bucket before the
// take that did not happen, its cost (the sum of the requests naming the
// bucket) added back. Exact on every algorithm, for the integer costs ops
// have: an allowed take of cost c leaves a Remaining c below the bucket's
// (algorithm's TestTakeLowersRemainingByCost; TestDeniedCallReportsWhatStands
// in internal/rls on the memory and Redis stores). ResetAfter stays that
// of the take.
func asItStands(ops []Op, res []algorithm.Result) {
	denied := false
	for i := range ops {
		denied = denied || !res[i].Allowed && !ops[i].Shadow
	}
	if !denied {
		return
	}
	for i := range ops {
		if r := &res[i]; r.Allowed && !(ops[i].Params.Charge && ops[i].Cost > 0) {
			r.Remaining += ops[i].Cost
		}
	}
}

// plan builds in sc the client ids of req and the ops of the rules that
// apply to it under ix, each keyed by the identity its rule wants (the
// rules in sc.used; see scratch.client), and sets d to the
// decision so far: allowed, with its plan and the count of ops, Now set
// when no rule applies (then nothing needs taking).
func (l *Limiter) plan(ix *rules.Index, req *Request, sc *scratch, d *Decision) ([]Op, error) {
	matched, err := l.match(ix, req, sc)
	if err != nil {
		return nil, err
	}
	if own := req.own(); ix.Replaces() || own != nil && len(own.Replaces) > 0 {
		matched = dropReplaced(matched, matched)
	}
	sc.kept = matched
	return l.ops(req, sc, matched, d), nil
}

// match builds in sc the client ids and the effective plan of req and
// returns the rules of ix that match it (in sc.matched).
//
// A call matches more than MaxRulesPerCall rules only through what it
// brings itself, an own limit or descriptor entries (see MaxRulesPerCall):
// match then returns ErrTooManyRules, which its callers turn into a denial
// (tooMany), with the client ids and plan in sc all the same.
func (l *Limiter) match(ix *rules.Index, req *Request, sc *scratch) ([]*rules.Compiled, error) {
	// Client ids live in sc.ids for the length of the call only: the store
	// copies what it keeps.
	// sc.ids has room for all three: it never reallocates.
	buf := sc.ids[:0]
	buf = identity.AppendUser(buf, req.User)
	nUser := len(buf)
	buf = identity.AppendAPIKey(buf, req.APIKey)
	if !ix.RegisteredID(bytesString(buf[nUser:])) {
		// An API key nobody registered is no caller, on every entry
		// point: inventing keys must not buy fresh buckets.
		buf = buf[:nUser]
	}
	nKey := len(buf)
	buf = identity.AppendIP(buf, req.IP, l.cfg.IPv6Prefix)
	user, apiKey, ip := bytesString(buf[:nUser]), bytesString(buf[nUser:nKey]), bytesString(buf[nKey:])

	plan := ix.Plan(req.Plan, user, apiKey, ip)
	sc.user, sc.apiKey, sc.ip, sc.plan = user, apiKey, ip, plan
	matched := ix.MatchHeader(plan, req.Method, req.Path, req.Header, sc.matched[:0])
	if d := req.desc; d != nil {
		switch {
		case d.Own != nil:
			if len(matched) >= MaxRulesPerCall {
				return nil, ErrTooManyRules
			}
			matched = append(matched, d.Own)
		case len(d.Entries) > 0 && ix.HasEntries():
			matched = ix.MatchEntries(d.Entries, matched)
		}
	}
	if len(matched) > MaxRulesPerCall {
		return nil, ErrTooManyRules
	}
	return matched, nil
}

// dropReplaced removes from rs, in place, the rules whose name a rule of
// by replaces (rules.Rule.Replaces), and returns what is left. A rule that
// is itself replaced still replaces, as in envoyproxy/ratelimit. by may be
// rs.
func dropReplaced(rs, by []*rules.Compiled) []*rules.Compiled {
	replacing := false
	for _, b := range by {
		replacing = replacing || len(b.Replaces) > 0
	}
	if !replacing {
		return rs
	}
	var drop [MaxRulesPerCall]bool // rs is at most that long
	for i, r := range rs {
		if r.Name == "" {
			continue
		}
		for _, b := range by {
			if slices.Contains(b.Replaces, r.Name) {
				drop[i] = true
				break
			}
		}
	}
	n := 0
	for i, r := range rs {
		if !drop[i] {
			rs[n] = r
			n++
		}
	}
	return rs[:n]
}

// ops builds in sc the ops of the matched rules of req (client ids and
// plan from match), and sets d, a zero Decision, as plan says.
func (l *Limiter) ops(req *Request, sc *scratch, matched []*rules.Compiled, d *Decision) []Op {
	user, apiKey, ip := sc.user, sc.apiKey, sc.ip
	cost := req.Cost
	switch {
	case req.Peek:
		cost = 0
	case cost <= 0:
		cost = 1
	}
	sc.own = req.own()
	ops := sc.ops[:0]
	in := &sc.in // built for the first rule keyed by more than the caller
	built := false
	keys := sc.keys[:0] // room for every rule's id: never reallocated
	unlimited := false
	for _, r := range matched {
		if r.Unlimited {
			unlimited = true // applies, takes nothing
			continue
		}
		var client string
		var ok bool
		if r == sc.own {
			client, ok = req.desc.OwnBucket, req.desc.OwnBucket != ""
		} else if r.KeyedByCaller() { // appendKey's first case, without building in
			_, client = pick(r.Key[0].Kind, user, apiKey, ip)
			ok = client != ""
		} else if j := sameKey(r, sc.used[:len(ops)], sc.own); j >= 0 {
			// Another rule of the call is keyed by the same: its id.
			client, ok = ops[j].Client, true
		} else {
			if !built {
				built = true
				*in = keyInput{user: user, apiKey: apiKey, ip: ip, method: req.Method, path: req.Path, header: req.Header, entries: req.entries(),
					epBuf: &sc.ep, foldBuf: &sc.epFold}
			}
			keys, client, ok = appendKey(keys, r, in)
		}
		if !ok {
			continue // the call lacks a value this rule is keyed by
		}
		n := len(ops)
		sc.used[n] = r
		ops = ops[:n+1] // sc.ops has room for every matched rule
		op := &ops[n]
		*op = Op{Client: client, Rule: r.ID, Params: r.Params, Cost: cost, Shadow: r.Shadow,
			FailClosed: r.FailsClosed(), Lease: r.Lease}
		if r.Limit == 0 {
			// Limit 0 admits nothing: taken as a bucket of 1 at a cost
			// beyond its capacity, which every algorithm denies (cost
			// exceeds capacity) without taking from any bucket of the
			// call; fold reports it as limit 0.
			op.Params.Limit = 1
			op.Params.Charge = false // not even a charge is taken
			op.Cost = op.Params.Capacity() + 1
		}
	}
	if built {
		*in = keyInput{} // the pooled scratch keeps no request
	}
	d.Allowed, d.Plan, d.Matched, d.Unlimited = true, sc.plan, len(ops), unlimited
	if len(ops) == 0 {
		d.Now = time.Now()
	}
	return ops
}

// client returns what the bucket of r, the rule of one of the call's ops,
// is keyed by (Decision.KeyedBy): the identity pick chose for a rule keyed
// by the caller, else the rule's by.
func (sc *scratch) client(r *rules.Compiled) rules.By {
	if r != sc.own && r.KeyedByCaller() {
		by, _ := pick(r.Key[0].Kind, sc.user, sc.apiKey, sc.ip)
		return by
	}
	return r.By
}

// sameKey returns the index in used, the rules of the ops built so far,
// of one keyed by what r is keyed by (the same By, and the same path case
// when the key names the endpoint), more than the caller,
// and not the call's own limit; -1 if none.
func sameKey(r *rules.Compiled, used []*rules.Compiled, own *rules.Compiled) int {
	for j, u := range used {
		if u.By == r.By && !u.KeyedByCaller() && u != own && foldsPath(u) == foldsPath(r) {
			return j
		}
	}
	return -1
}

// fold folds the results of the n ops plan built in sc (sc.res) and the
// store's info into d: the call passes only if every rule that is not a
// shadow allowed it, and d describes the most restrictive of them.
func fold(d *Decision, sc *scratch, n int, info TakeInfo) {
	d.Now = time.UnixMicro(info.Now)
	d.Origin = info.Origin
	ops, res, used := sc.ops[:n], sc.res[:n], &sc.used
	best := 0
	if n == 1 && !ops[0].Shadow { // the usual call: one rule, nothing to rank
		d.Allowed = res[0].Allowed
	} else {
		best = rank(d, ops, res, used)
	}
	r := &res[best]
	d.Rule, d.KeyedBy = used[best], sc.client(used[best])
	d.Limit = used[best].Limit
	d.Remaining = r.Remaining
	d.ResetAfter = time.Duration(r.ResetAfter) * time.Microsecond
	if d.Limit == 0 { // nothing remains; its window ends as a fixed window's
		w := used[best].Params.Window
		d.Remaining = 0
		d.ResetAfter = time.Duration(w-info.Now%w) * time.Microsecond
	}
	if !d.Allowed {
		d.Reason = r.Reason
		d.RetryAfter = time.Duration(r.RetryAfter) * time.Microsecond
	}
}

// rank sets d.Allowed and d.ShadowDenied from the results of ops and
// returns the index of the most restrictive: of the rules that are not
// shadows, else — only shadow rules matched, and the call is allowed — of
// all.
func rank(d *Decision, ops []Op, res []algorithm.Result, used *[MaxRulesPerCall]*rules.Compiled) int {
	best := -1
	for i := range ops {
		r := &res[i]
		if ops[i].Shadow {
			if !r.Allowed && d.ShadowDenied == "" {
				d.ShadowDenied = used[i].ID
			}
			continue
		}
		if !r.Allowed {
			d.Allowed = false
		}
		if best < 0 || restrict.More(r, &res[best]) {
			best = i
		}
	}
	if best < 0 { // only shadow rules matched
		for i := range ops {
			if best < 0 || restrict.More(&res[i], &res[best]) {
				best = i
			}
		}
		d.Allowed = true
	}
	return best
}

// pick returns the identity a key part of kind k (rulekey.Part.Caller)
// uses, and its client id: for KeyClient the user, else the API key, else
// the IP.
func pick(k rulekey.Kind, user, apiKey, ip string) (rules.By, string) {
	switch k {
	case rulekey.User:
		return rules.ByUser, user
	case rulekey.APIKey:
		return rules.ByAPIKey, apiKey
	case rulekey.IP:
		return rules.ByIP, ip
	}
	switch {
	case user != "":
		return rules.ByUser, user
	case apiKey != "":
		return rules.ByAPIKey, apiKey
	}
	return rules.ByIP, ip
}

// AppendClientID appends to dst the client id a decision's rule keyed req
// by (Decision.KeyedBy): the id Check built, "" for an identity req lacks.
// by "" or ByClient means the first of user, API key, IP present.
func (l *Limiter) AppendClientID(dst []byte, by rules.By, req *Request) []byte {
	id := identity.Identity{User: req.User, APIKey: req.APIKey, IP: req.IP}
	if id.APIKey != "" && !l.rules.Load().RegisteredAPIKey(id.APIKey) {
		id.APIKey = "" // no caller, as in match
	}
	return id.AppendClientID(dst, string(by), l.cfg.IPv6Prefix)
}

func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
