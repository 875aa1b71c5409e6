// Package console keeps what the operator console (served by the admin
// API, internal/admin) shows besides the rules: the callers denied most
// per rule (Hitters, fed on the denial path only) and the recent rates,
// store health and latency read once a second from the Prometheus metrics
// the limiter already keeps (Sampler). Neither adds work to an allowed
// call.
package console

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"hash/maphash"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Bounds of the heavy-hitters summary. Its memory is at most
// Shards × MaxRules × 2 generations × K entries, each a client id (at most
// 264 bytes, identity.MaxID) with two counters and a map slot: about
// 8 × 256 × 2 × 32 × 400 B ≈ 52 MB in the worst case (256 rules each
// denying thousands of distinct callers a minute), typically kilobytes.
const (
	// K is the number of counters per rule and generation.
	K = 32
	// MaxRules is the number of rules tracked at once; denials of further
	// rules are counted in Untracked until a generation turns over.
	MaxRules = 256
	// DefaultPeriod is how long a generation counts: the top list covers
	// the last one to two periods.
	DefaultPeriod = time.Minute
	// Exact is the number of denials a shard counts one by one in a
	// generation; past it, in any shard, the summary samples: one denial
	// in SampleEvery counts SampleEvery, until the generation turns.
	Exact = 256
	// SampleEvery is the sampling rate past Exact.
	SampleEvery = 1 << sampleBits
	sampleBits  = 6
)

// Hitters is a space-saving summary (Metwally, Agrawal, El Abbadi 2005) of
// the callers denied most, per rule, over the last one to two Periods:
// two generations, the current and the previous, each K counters per
// rule in each of Shards shards (a caller always counts in the same one).
// While every shard has counted fewer than Exact denials in a generation,
// a caller counted c times and the summary's count ĉ satisfy
// c ≤ ĉ ≤ c + N/K, N being the rule's denials in the generations shown,
// and every caller denied more than N/K times is in the list. Past that
// (a flood) the summary counts one denial in SampleEvery (of all rules
// and callers together, picked by a hash of its number), weighing
// SampleEvery: a caller's count is then an estimate off by about
// ±√(SampleEvery·c) besides the N/K overcount, so that a flood costs a
// denial one atomic add and one multiplication. Safe for concurrent use;
// a counted denial takes the mutex of one shard, allowed calls never
// reach it. Generations turn in Run (every Period) and Top.
type Hitters struct {
	period time.Duration
	now    func() time.Time
	seed   maphash.Seed
	// mask is 0 while denials count one by one, SampleEvery-1 while they
	// are sampled (weight); tick counts the denials while they are.
	mask   atomic.Uint32
	tick   atomic.Uint64
	_      [56]byte // its own cache line
	shards [Shards]shard
}

// Shards is the number of independently locked parts of a Hitters, so
// that denials on several cores rarely wait on each other.
const Shards = 8

type shard struct {
	mu        sync.Mutex
	start     time.Time // of the current generation
	cur, prev map[string]*summary
	untracked uint64
	counted   int      // denials counted in the current generation
	_         [64]byte // its own cache line
}

type summary struct {
	n     uint64 // denials counted
	items []item // at most K, scanned: cheaper than a map at this size
}

type item struct {
	h     uint64 // maphash of the client id
	buf   []byte // the client id, reused when another caller takes the slot
	count uint64
	err   uint64 // the count inherited when the entry took a slot: the overestimate
}

// NewHitters returns an empty summary whose generations last period
// (DefaultPeriod when ≤ 0). now is the clock (time.Now when nil).
func NewHitters(period time.Duration, now func() time.Time) *Hitters {
	if period <= 0 {
		period = DefaultPeriod
	}
	if now == nil {
		now = time.Now
	}
	h := &Hitters{period: period, now: now, seed: maphash.MakeSeed()}
	t := now()
	for i := range h.shards {
		h.shards[i] = shard{start: t, cur: map[string]*summary{}, prev: map[string]*summary{}}
	}
	return h
}

// Run turns the generations every period until ctx is done.
func (h *Hitters) Run(ctx context.Context) {
	t := time.NewTicker(h.period / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.turn(h.now())
		}
	}
}

// turn moves every shard to a new generation when the current one is
// over; denials count one by one again.
func (h *Hitters) turn(t time.Time) {
	turned := false
	for i := range h.shards {
		sh := &h.shards[i]
		sh.mu.Lock()
		turned = sh.turn(t, h.period) || turned
		sh.mu.Unlock()
	}
	if turned {
		h.mask.Store(0)
	}
}

// turn moves to a new generation when the current one is over.
func (sh *shard) turn(t time.Time, period time.Duration) bool {
	switch d := t.Sub(sh.start); {
	case d >= 2*period:
		sh.prev, sh.cur = map[string]*summary{}, map[string]*summary{}
		sh.start = t
	case d >= period:
		sh.prev, sh.cur = sh.cur, map[string]*summary{}
		sh.start = sh.start.Add(period)
	default:
		return false
	}
	sh.untracked, sh.counted = 0, 0
	return true
}

// weight returns what a denial counts: 1 while denials count one by one;
// while they are sampled, SampleEvery for one denial in SampleEvery (of
// any rule and caller), chosen by a hash of its number, and 0 (not
// counted) for the others. It costs a denial one atomic add and one
// multiplication.
func (h *Hitters) weight() uint64 {
	m := h.mask.Load()
	if m == 0 {
		return 1
	}
	// The denial's number times 2⁶⁴/φ (Fibonacci hashing): its top bits
	// pick one denial in SampleEvery, spread evenly over any period, so
	// that callers denied in turns (a round-robin load) are sampled
	// alike, never one of them always.
	if (h.tick.Add(1)*0x9e3779b97f4a7c15)>>(64-sampleBits) != 0 {
		return 0
	}
	return uint64(m) + 1
}

// Denied counts one denial of client (a client id as the store keys it)
// by rule, sampled as weight says. It keeps neither string.
func (h *Hitters) Denied(rule, client string) {
	if w := h.weight(); w != 0 {
		h.add(rule, client, w)
	}
}

// add counts a denial of client by rule that weighs w.
func (h *Hitters) add(rule, client string, w uint64) {
	hc := maphash.String(h.seed, client)
	sh := &h.shards[hc%Shards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.counted++; sh.counted == Exact {
		h.mask.Store(SampleEvery - 1)
	}
	s := sh.cur[rule]
	if s == nil {
		if len(sh.cur) >= MaxRules {
			sh.untracked += w
			return
		}
		s = &summary{items: make([]item, 0, K)}
		sh.cur[strings.Clone(rule)] = s
	}
	s.n += w
	m := 0
	for i := range s.items {
		it := &s.items[i]
		if it.h == hc && string(it.buf) == client {
			it.count += w
			return
		}
		if it.count < s.items[m].count {
			m = i
		}
	}
	if len(s.items) < K {
		s.items = append(s.items, item{h: hc, buf: []byte(client), count: w})
		return
	}
	// Space-saving: the new caller takes the slot of the least counted,
	// inheriting its count as its possible overestimate.
	it := &s.items[m]
	it.h, it.buf, it.err = hc, append(it.buf[:0], client...), it.count
	it.count += w
}

func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// Hitter is one caller of a top list.
type Hitter struct {
	Client string // the client id as the store keys it: may hold a secret, never show it
	Shown  string // the client as an operator recognises it (Display)
	Count  uint64 // denials counted: at most MaxErr more than the true count
	MaxErr uint64
}

// Top is one rule's top list.
type Top struct {
	Rule    string
	Denials uint64 // denials of the rule in the generations shown
	Bound   uint64 // Denials / K: no caller's count is off by more
	Callers []Hitter
}

// Top returns, per rule, the n callers denied most over the current and
// the previous generation, most denied first; rules by denials, most
// first. It also returns the denials of rules beyond MaxRules, untracked.
func (h *Hitters) Top(n int) ([]Top, uint64) {
	type merged1 struct{ count, err uint64 }
	type acc struct {
		n     uint64
		items map[string]merged1
	}
	merged := map[string]*acc{}
	var untracked uint64
	h.turn(h.now())
	for i := range h.shards {
		sh := &h.shards[i]
		sh.mu.Lock()
		for _, gen := range []map[string]*summary{sh.prev, sh.cur} {
			for rule, s := range gen {
				a := merged[rule]
				if a == nil {
					a = &acc{items: map[string]merged1{}}
					merged[rule] = a
				}
				a.n += s.n
				for _, it := range s.items {
					id := string(it.buf)
					m := a.items[id]
					a.items[id] = merged1{m.count + it.count, m.err + it.err}
				}
			}
		}
		untracked += sh.untracked
		sh.mu.Unlock()
	}

	out := make([]Top, 0, len(merged))
	for rule, a := range merged {
		t := Top{Rule: rule, Denials: a.n, Bound: a.n / K}
		for id, it := range a.items {
			t.Callers = append(t.Callers, Hitter{Client: id, Shown: Display(id), Count: it.count, MaxErr: it.err})
		}
		slices.SortFunc(t.Callers, func(x, y Hitter) int {
			if x.Count != y.Count {
				return int(y.Count) - int(x.Count)
			}
			return strings.Compare(x.Client, y.Client)
		})
		if len(t.Callers) > n {
			t.Callers = t.Callers[:n]
		}
		out = append(out, t)
	}
	slices.SortFunc(out, func(x, y Top) int {
		if x.Denials != y.Denials {
			if x.Denials > y.Denials {
				return -1
			}
			return 1
		}
		return strings.Compare(x.Rule, y.Rule)
	})
	return out, untracked
}

// Display returns a bucket's id as an operator recognises it, never a
// secret in clear: a user ("user:alice"), an IP address or IPv6 /64
// ("ip:2001:db8::/64"), "global" and an endpoint ("endpoint:GET
// /api/orders") as they are; a header's or a descriptor entry's value
// as it is ("header:x-tenant=acme", "entry:generic_key=checkout") unless
// its name says it may be a credential (Credential), then by its
// fingerprint, the first 8 hex digits of the SHA-256 of the value
// ("header:authorization=#3f2a9c1e"); an API key, and anything else, as
// its kind and fingerprint ("api_key:#3f2a9c1e"), which an operator
// holding the key computes with `printf %s KEY | sha256sum`. A value
// sluice already keys by its digest ("user:h:…") is shown as it is. The
// parts of a bucket keyed by several ("017:api_key:k_live_42|…") are
// shown each so, joined by " + ".
func Display(client string) string {
	if parts, ok := splitParts(client); ok {
		for i, p := range parts {
			parts[i] = displayPart(p)
		}
		return strings.Join(parts, " + ")
	}
	return displayPart(client)
}

func displayPart(client string) string {
	kind, v, ok := strings.Cut(client, ":")
	if !ok {
		if client == "global" {
			return client
		}
		return "#" + Fingerprint(client)
	}
	switch {
	case kind == "user" || kind == "ip" || kind == "endpoint":
		return client
	case strings.HasPrefix(v, "h:"):
		return client
	case kind == "header" || kind == "entry":
		name, value, _ := strings.Cut(v, "=")
		if !Credential(name) || value == "" || strings.HasPrefix(value, "h:") {
			return client
		}
		return kind + ":" + name + "=#" + Fingerprint(value)
	}
	return kind + ":#" + Fingerprint(v)
}

// splitParts splits the id of a bucket keyed by several parts, each
// prefixed by its length in three digits and joined by "|"
// ("017:api_key:k_live_42|024:endpoint:GET /api/orders"); ok is false for
// any other id.
func splitParts(id string) (parts []string, ok bool) {
	for len(id) > 0 {
		if len(id) < 4 || id[3] != ':' {
			return nil, false
		}
		n, err := strconv.Atoi(id[:3])
		if err != nil || n < 0 || 4+n > len(id) {
			return nil, false
		}
		parts = append(parts, id[4:4+n])
		id = id[4+n:]
		if len(id) > 0 {
			if id[0] != '|' {
				return nil, false
			}
			id = id[1:]
		}
	}
	return parts, len(parts) > 1
}

// Credential reports whether a header or descriptor entry of this name
// may carry a credential (Authorization, Cookie, X-API-Key, a token, a
// secret, a password, a session, a signature, a key other than Envoy's
// generic_key): the console shows its values by fingerprint only.
func Credential(name string) bool {
	n := strings.ToLower(name)
	for _, w := range []string{"auth", "cookie", "token", "secret", "pass", "session", "credential", "signature", "apikey", "api_key", "api-key"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return strings.HasSuffix(n, "key") && n != "generic_key"
}

// Fingerprint is the first 8 hex digits of the SHA-256 of v.
func Fingerprint(v string) string {
	sum := sha256.Sum256([]byte(v))
	return hex.EncodeToString(sum[:4])
}
