package rls_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/rules"
)

// TestDenialCacheReportsTheOthers: a request of two descriptors whose
// first the Redis store's local denial cache would deny (it was over its
// limit at Redis a moment before) reports the second descriptor's real
// limit_remaining and duration_until_reset, as Redis does — not
// 4294967295 and 0, the stand-ins the cache gives the buckets it does not
// read.
func TestDenialCacheReportsTheOthers(t *testing.T) {
	set := &rules.Set{Rules: []rules.Rule{
		{ID: "a", Match: rules.Match{Domain: "d", Entries: []rules.Entry{{Key: "a"}}}, By: "entry:a", Limit: 1, Window: rules.Duration(time.Hour), Algorithm: algorithm.FixedWindow},
		{ID: "b", Match: rules.Match{Domain: "d", Entries: []rules.Entry{{Key: "b"}}}, By: "entry:b", Limit: 10, Window: minute, Algorithm: algorithm.FixedWindow},
	}}
	e := newEnvStore(t, set, "redis", stores(t)["redis"](t), nil)
	req := request("d", desc("a", "1"), desc("b", "1"))
	if resp := e.call(t, req); resp.OverallCode != ok {
		t.Fatalf("call 1 = %v, want OK", resp.OverallCode)
	}
	for i := 2; i <= 4; i++ { // 2: Redis denies (and the cache learns), 3 and 4: the cache denies
		resp := e.call(t, req)
		b := resp.Statuses[1]
		reset := b.GetDurationUntilReset().AsDuration()
		// 9, or 10 in a new minute's window, had the calls crossed one.
		if resp.OverallCode != over || b.Code != ok || b.LimitRemaining != 9 && b.LimitRemaining != 10 || reset <= 0 || reset > time.Minute {
			t.Errorf("call %d = %v, b %v; want OVER_LIMIT, b OK with 9 remaining (what b holds: a denied call takes nothing) and a reset within a minute",
				i, resp.OverallCode, b)
		}
	}
	// The cache holds a's denial (a call of a alone is denied by it), which
	// the calls above found too: they were read from Redis instead.
	if resp := e.call(t, request("d", desc("a", "1"))); resp.OverallCode != over {
		t.Fatalf("a alone = %v, want OVER_LIMIT", resp.OverallCode)
	}
	if got := counter(t, e, "sluice_decisions_total", map[string]string{"rule": "a", "outcome": "denied", "source": "local_denial_cache"}); got != 1 {
		t.Errorf("denials of a from the local denial cache: %v, want 1 (a alone)", got)
	}
}
