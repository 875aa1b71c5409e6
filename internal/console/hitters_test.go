package console

import (
	"fmt"
	"testing"
	"time"
)

// TestHittersFindsFlooder: among many callers denied a few times each,
// the one denied most is first with a count within the stated bound.
func TestHittersFindsFlooder(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	h := NewHitters(time.Minute, func() time.Time { return now })
	const flood = 5000
	for i := range flood {
		h.Denied("per-user", "user:flood")
		if i%5 == 0 {
			h.Denied("per-user", fmt.Sprintf("user:u%d", i))
		}
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

func TestHittersBounded(t *testing.T) {
	h := NewHitters(time.Minute, nil)
	for r := range MaxRules + 10 {
		for c := range 3 * K {
			h.Denied(fmt.Sprint("r", r), fmt.Sprint("user:", c))
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
		"user:alice":          "user:alice",
		"ip:2001:db8::/64":    "ip:2001:db8::/64",
		"ip:203.0.113.7":      "ip:203.0.113.7",
		"api_key:k_live_42":   "api_key:#" + fingerprint("k_live_42"),
		"user:h:0123456789ab": "user:h:0123456789ab",
	} {
		if got := Display(in); got != want {
			t.Errorf("Display(%q) = %q, want %q", in, got, want)
		}
	}
}
