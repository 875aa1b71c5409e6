package rules

import (
	"strings"
	"testing"
	"time"
)

// TestMaxReserveWait: max_reserve_wait is read from YAML and JSON, written
// back, and validated with errors that name it.
func TestMaxReserveWait(t *testing.T) {
	s, err := ParseYAML([]byte("rules:\n  - {id: p, limit: 10, window: 1s, algorithm: leaky_bucket, max_reserve_wait: 30s}\n"))
	if err != nil || time.Duration(s.Rules[0].MaxReserveWait) != 30*time.Second {
		t.Fatalf("ParseYAML = %v, %v; want max_reserve_wait 30s", s, err)
	}
	out, err := EncodeYAML(s)
	if err != nil || !strings.Contains(string(out), "max_reserve_wait: 30s") {
		t.Errorf("EncodeYAML = %s, %v; want max_reserve_wait: 30s", out, err)
	}
	if r, err := decodeRuleJSON([]byte(`{"id": "p", "limit": 10, "window": "1s", "max_reserve_wait": "2m"}`)); err != nil || time.Duration(r.MaxReserveWait) != 2*time.Minute {
		t.Errorf("DecodeRuleJSON = %+v, %v; want max_reserve_wait 2m", r, err)
	}
	for _, tc := range []struct{ rule, want string }{
		{`{"id": "p", "limit": 10, "window": "1s", "algorithm": "fixed_window", "max_reserve_wait": "1m"}`, "max_reserve_wait: only token_bucket and leaky_bucket rules reserve"},
		{`{"id": "p", "limit": 10, "window": "1s", "max_reserve_wait": "2h"}`, "max_reserve_wait: must be ≤ 1h"},
		{`{"id": "p", "limit": 10, "window": "1s", "max_reserve_wait": "500us"}`, "max_reserve_wait: must be a whole number of milliseconds"},
		{`{"id": "p", "limit": 10, "window": "1s", "max_reserve_wait": "-1s"}`, "max_reserve_wait: must be a whole number of milliseconds"},
		{`{"id": "p", "limit": 10, "window": "1s", "max_reserve_wait": 60}`, "max_reserve_wait: want a duration"},
		{`{"id": "p", "unlimited": true, "max_reserve_wait": "1m"}`, "max_reserve_wait: an unlimited rule has no budget"},
	} {
		if _, err := decodeRuleJSON([]byte(tc.rule)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("decodeRuleJSON(%s) = %v, want an error containing %q", tc.rule, err, tc.want)
		}
	}
}
