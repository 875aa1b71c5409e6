package console

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// TestHittersFindsFlooder: among many callers denied a few times each,
// the one denied most is first with a count within the stated bound.
// Below Exact denials a shard, every denial counts.
func TestHittersFindsFlooder(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	h := NewHitters(time.Minute, func() time.Time { return now })
	const flood = 200
	for i := range flood {
		h.Denied("per-user", "user:flood")
		if i%5 == 0 {
			h.Denied("per-user", fmt.Sprintf("user:u%d", i))
		}
	}
	if h.mask.Load() != 0 {
		t.Fatalf("sampling after %d denials, want every one counted below %d a shard", flood+flood/5, Exact)
	}
	top, _ := h.Top(5)
	if len(top) != 1 || top[0].Rule != "per-user" {
		t.Fatalf("Top = %+v, want one rule per-user", top)
	}
	c := top[0].Callers[0]
	if c.Client != "user:flood" || c.Count < flood || c.Count > flood+top[0].Bound {
		t.Fatalf("first = %+v, want user:flood counted in [%d, %d]", c, flood, flood+top[0].Bound)
	}
	// The next generation keeps the last one; the one after drops it.
	now = now.Add(time.Minute)
	if top, _ := h.Top(5); len(top) != 1 || top[0].Callers[0].Client != "user:flood" {
		t.Fatalf("one period later: %+v, want user:flood still first", top)
	}
	now = now.Add(time.Minute)
	if top, _ := h.Top(5); len(top) != 0 {
		t.Fatalf("two periods later: %+v, want nothing", top)
	}
}

// TestHittersSamplesFlood: past Exact denials in a shard, the summary
// samples; the flooding caller is still first, its count within 6
// standard deviations (√(SampleEvery·c)) besides the N/K bound, and a
// new generation counts one by one again.
func TestHittersSamplesFlood(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	h := NewHitters(time.Minute, func() time.Time { return now })
	const flood = 100_000
	for i := range flood {
		h.Denied("per-user", "user:flood")
		if i%5 == 0 {
			h.Denied("per-user", fmt.Sprintf("user:u%d", i))
		}
	}
	if h.mask.Load() != SampleEvery-1 {
		t.Fatalf("mask %d after a flood, want sampling (%d)", h.mask.Load(), SampleEvery-1)
	}
	top, _ := h.Top(5)
	c := top[0].Callers[0]
	sd := math.Sqrt(SampleEvery * flood)
	if c.Client != "user:flood" || float64(c.Count) < flood-6*sd || float64(c.Count) > flood+6*sd+float64(top[0].Bound) {
		t.Fatalf("first = %+v, want user:flood counted %d ± %.0f", c, flood, 6*sd)
	}
	now = now.Add(time.Minute)
	h.Top(5)
	if h.mask.Load() != 0 {
		t.Fatalf("a new generation samples: mask %d, want 0", h.mask.Load())
	}
}

func TestHittersBounded(t *testing.T) {
	h := NewHitters(time.Minute, nil)
	for r := range MaxRules + 10 {
		for c := range 3 * K {
			h.add(fmt.Sprint("r", r), fmt.Sprint("user:", c), 1)
		}
	}
	top, untracked := h.Top(K + 10)
	if len(top) != MaxRules || untracked != 10*3*K {
		t.Fatalf("rules %d untracked %d, want %d and %d", len(top), untracked, MaxRules, 10*3*K)
	}
	for i := range h.shards {
		sh := &h.shards[i]
		if len(sh.cur) > MaxRules {
			t.Fatalf("shard %d holds %d rules, want at most %d", i, len(sh.cur), MaxRules)
		}
		for rule, s := range sh.cur {
			if len(s.items) > K || cap(s.items) > K {
				t.Fatalf("shard %d rule %s holds %d callers, want at most %d", i, rule, len(s.items), K)
			}
		}
	}
}

func TestDisplayHidesSecrets(t *testing.T) {
	for in, want := range map[string]string{
		"user:alice":                    "user:alice",
		"ip:2001:db8::/64":              "ip:2001:db8::/64",
		"ip:203.0.113.7":                "ip:203.0.113.7",
		"api_key:k_live_42":             "api_key:#" + Fingerprint("k_live_42"),
		"user:h:0123456789ab":           "user:h:0123456789ab",
		"global":                        "global",
		"endpoint:GET /api/orders":      "endpoint:GET /api/orders",
		"header:x-tenant=acme":          "header:x-tenant=acme",
		"header:authorization=Bearer x": "header:authorization=#" + Fingerprint("Bearer x"),
		"entry:generic_key=checkout":    "entry:generic_key=checkout",
		"entry:api_key=k1":              "entry:api_key=#" + Fingerprint("k1"),
		"desc:h:0123456789abcdef":       "desc:h:0123456789abcdef",
		"017:api_key:k_live_42|024:endpoint:GET /api/orders": "api_key:#" + Fingerprint("k_live_42") + " + endpoint:GET /api/orders",
	} {
		if got := Display(in); got != want {
			t.Errorf("Display(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestHittersSamplesTurnsAlike: callers denied in turns (a round-robin
// load) are sampled alike, none of them always or never.
func TestHittersSamplesTurnsAlike(t *testing.T) {
	h := NewHitters(time.Minute, nil)
	const each = 64_000
	for range each {
		h.Denied("per-user", "user:a")
		h.Denied("per-user", "user:b")
	}
	top, _ := h.Top(5)
	sd := math.Sqrt(SampleEvery * each)
	for _, c := range top[0].Callers {
		if math.Abs(float64(c.Count)-each) > 6*sd {
			t.Errorf("%s counted %d, want %d ± %.0f", c.Client, c.Count, each, 6*sd)
		}
	}
}
