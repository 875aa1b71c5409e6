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
	"strings"
	"sync"
	"time"
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
)

// Hitters is a space-saving summary (Metwally, Agrawal, El Abbadi 2005) of
// the callers denied most, per rule, over the last one to two Periods:
// two generations, the current and the previous, each K counters per
// rule in each of Shards shards (a caller always counts in the same one).
// A caller counted c times and the summary's count ĉ satisfy
// c ≤ ĉ ≤ c + N/K, N being the rule's denials in the generations shown;
// every caller denied more than N/K times is in the list. Safe for
// concurrent use; Denied takes the mutex of one shard, allowed calls
// never reach it. Generations turn in Run (every Period) and Top.
type Hitters struct {
	period time.Duration
	now    func() time.Time
	seed   maphash.Seed
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
			now := h.now()
			for i := range h.shards {
				sh := &h.shards[i]
				sh.mu.Lock()
				sh.turn(now, h.period)
				sh.mu.Unlock()
			}
		}
	}
}

// turn moves to a new generation when the current one is over.
func (sh *shard) turn(t time.Time, period time.Duration) {
	switch d := t.Sub(sh.start); {
	case d >= 2*period:
		sh.prev, sh.cur = map[string]*summary{}, map[string]*summary{}
		sh.start, sh.untracked = t, 0
	case d >= period:
		sh.prev, sh.cur = sh.cur, map[string]*summary{}
		sh.start, sh.untracked = sh.start.Add(period), 0
	}
}

// Denied counts one denial of client (a client id as the store keys it)
// by rule. It keeps neither string.
func (h *Hitters) Denied(rule, client string) {
	hc := maphash.String(h.seed, client)
	sh := &h.shards[hc%Shards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	s := sh.cur[rule]
	if s == nil {
		if len(sh.cur) >= MaxRules {
			sh.untracked++
			return
		}
		s = &summary{items: make([]item, 0, K)}
		sh.cur[strings.Clone(rule)] = s
	}
	s.n++
	m := 0
	for i := range s.items {
		it := &s.items[i]
		if it.h == hc && string(it.buf) == client {
			it.count++
			return
		}
		if it.count < s.items[m].count {
			m = i
		}
	}
	if len(s.items) < K {
		s.items = append(s.items, item{h: hc, buf: []byte(client), count: 1})
		return
	}
	// Space-saving: the new caller takes the slot of the least counted,
	// inheriting its count as its possible overestimate.
	it := &s.items[m]
	it.h, it.buf, it.err = hc, append(it.buf[:0], client...), it.count
	it.count++
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
	type merged1 struct{ count, err uint64 }
	type acc struct {
		n     uint64
		items map[string]merged1
	}
	merged := map[string]*acc{}
	var untracked uint64
	now := h.now()
	for i := range h.shards {
		sh := &h.shards[i]
		sh.mu.Lock()
		sh.turn(now, h.period)
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
