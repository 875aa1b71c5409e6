// Package console keeps what the operator console (served by the admin
// API, internal/admin) shows besides the rules: the callers denied most
// per rule (Hitters, fed on the denial path only) and the recent rates,
// store health and latency read once a second from the Prometheus metrics
// the limiter already keeps (Sampler). Neither adds work to an allowed
// call.
package console

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"sync"
	"time"
)

// Bounds of the heavy-hitters summary. Its memory is at most
// MaxRules × 2 generations × K entries, each a client id (at most a few
// hundred bytes) and two counters: about 256 × 2 × 32 × 300 B ≈ 5 MB in
// the worst case, typically a few kilobytes.
const (
	// K is the number of counters per rule and generation.
	K = 32
	// MaxRules is the number of rules tracked at once; denials of further
	// rules are counted in Untracked until a generation turns over.
	MaxRules = 256
	// DefaultPeriod is how long a generation counts: the top list covers
	// the last one to two periods.
	DefaultPeriod = time.Minute
)

// Hitters is a space-saving summary (Metwally, Agrawal, El Abbadi 2005) of
// the callers denied most, per rule, over the last one to two Periods:
// two generations, the current and the previous, each K counters per
// rule. A caller counted c times and the summary's count ĉ satisfy
// c ≤ ĉ ≤ c + N/K, N being the rule's denials in the generations shown;
// every caller denied more than N/K times is in the list. Safe for
// concurrent use; Denied takes a mutex, Allowed calls never reach it.
type Hitters struct {
	period time.Duration
	now    func() time.Time

	mu        sync.Mutex
	start     time.Time // of the current generation
	cur, prev map[string]*summary
	untracked uint64
}

type summary struct {
	n     uint64 // denials counted
	items []item
	at    map[string]int // client id → index in items
}

type item struct {
	id    string
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
	return &Hitters{period: period, now: now, start: now(), cur: map[string]*summary{}, prev: map[string]*summary{}}
}

// turn moves to a new generation when the current one is over.
func (h *Hitters) turn(t time.Time) {
	switch d := t.Sub(h.start); {
	case d >= 2*h.period:
		h.prev, h.cur = map[string]*summary{}, map[string]*summary{}
		h.start, h.untracked = t, 0
	case d >= h.period:
		h.prev, h.cur = h.cur, map[string]*summary{}
		h.start, h.untracked = h.start.Add(h.period), 0
	}
}

// Denied counts one denial of client (a client id as the store keys it)
// by rule.
func (h *Hitters) Denied(rule, client string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.turn(h.now())
	s := h.cur[rule]
	if s == nil {
		if len(h.cur) >= MaxRules {
			h.untracked++
			return
		}
		s = &summary{at: make(map[string]int, K)}
		h.cur[rule] = s
	}
	s.n++
	if i, ok := s.at[client]; ok {
		s.items[i].count++
		return
	}
	if len(s.items) < K {
		s.at[strings.Clone(client)] = len(s.items)
		s.items = append(s.items, item{id: strings.Clone(client), count: 1})
		return
	}
	// Space-saving: the new caller takes the slot of the least counted,
	// inheriting its count as its possible overestimate.
	m := 0
	for i := range s.items {
		if s.items[i].count < s.items[m].count {
			m = i
		}
	}
	old := s.items[m]
	delete(s.at, old.id)
	id := strings.Clone(client)
	s.items[m] = item{id: id, count: old.count + 1, err: old.count}
	s.at[id] = m
}

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
	h.mu.Lock()
	h.turn(h.now())
	type acc struct {
		n     uint64
		items map[string]item
	}
	merged := map[string]*acc{}
	for _, gen := range []map[string]*summary{h.prev, h.cur} {
		for rule, s := range gen {
			a := merged[rule]
			if a == nil {
				a = &acc{items: map[string]item{}}
				merged[rule] = a
			}
			a.n += s.n
			for _, it := range s.items {
				m := a.items[it.id]
				m.id, m.count, m.err = it.id, m.count+it.count, m.err+it.err
				a.items[it.id] = m
			}
		}
	}
	untracked := h.untracked
	h.mu.Unlock()

	out := make([]Top, 0, len(merged))
	for rule, a := range merged {
		t := Top{Rule: rule, Denials: a.n, Bound: a.n / K}
		for _, it := range a.items {
			t.Callers = append(t.Callers, Hitter{Client: it.id, Shown: Display(it.id), Count: it.count, MaxErr: it.err})
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

// Display returns a client id as an operator recognises it, never a
// secret in clear: a user ("user:alice") and an IP address or IPv6 /64
// ("ip:2001:db8::/64") as they are; anything else — an API key, a header
// or descriptor value, which may be a credential — as its kind and a
// fingerprint, the first 8 hex digits of the SHA-256 of the value
// ("api_key:#3f2a9c1e"), which an operator holding the key computes with
// `printf %s KEY | sha256sum`. A value sluice already keys by its digest
// ("user:h:…") is shown as it is.
func Display(client string) string {
	kind, v, ok := strings.Cut(client, ":")
	if !ok {
		return "#" + fingerprint(client)
	}
	switch {
	case kind == "user" || kind == "ip":
		return client
	case strings.HasPrefix(v, "h:"):
		return client
	}
	return kind + ":#" + fingerprint(v)
}

func fingerprint(v string) string {
	sum := sha256.Sum256([]byte(v))
	return hex.EncodeToString(sum[:4])
}
