package rls

import (
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/rules"
)

func TestCurrentLimit(t *testing.T) {
	const (
		sec    = rlsv3.RateLimitResponse_RateLimit_SECOND
		minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
		hour   = rlsv3.RateLimitResponse_RateLimit_HOUR
		day    = rlsv3.RateLimitResponse_RateLimit_DAY
		week   = rlsv3.RateLimitResponse_RateLimit_WEEK
		month  = rlsv3.RateLimitResponse_RateLimit_MONTH
		year   = rlsv3.RateLimitResponse_RateLimit_YEAR
	)
	tests := []struct {
		limit  int64
		window time.Duration
		rpu    uint32
		unit   rlsv3.RateLimitResponse_RateLimit_Unit
		mult   uint32 // 0: none
	}{
		{100, time.Second, 100, sec, 0},
		{100, time.Minute, 100, minute, 0},
		{100, 10 * time.Minute, 100, minute, 10},
		{5, 90 * time.Second, 5, sec, 90},
		{1000, time.Hour, 1000, hour, 0},
		{1000, 36 * time.Hour, 1000, hour, 36},
		{1, 24 * time.Hour, 1, day, 0},
		{1, 30 * 24 * time.Hour, 1, month, 0}, // Envoy's MONTH is 30 days, as envoyproxy/ratelimit's
		{1, 60 * 24 * time.Hour, 1, month, 2},
		{1, 365 * 24 * time.Hour, 1, year, 0}, // and its YEAR 365
		{1, 31 * 24 * time.Hour, 1, day, 31},
		{7, 14 * 24 * time.Hour, 7, week, 2},
		{10, 500 * time.Millisecond, 20, sec, 0},              // a fraction of a second: a rate per second
		{3, 1500 * time.Millisecond, 2, sec, 0},               // 2/s, rounded
		{1, 10 * time.Second / 3 * 3, 1, sec, 0},              // 9.999999999s is not whole seconds: 0.1/s, at least 1
		{1_000_000_000, time.Millisecond, 4294967295, sec, 0}, // 1e12/s, clamped
	}
	for _, tt := range tests {
		r := &rules.Compiled{Rule: rules.Rule{ID: "r", Limit: tt.limit, Window: rules.Duration(tt.window)}}
		got := CurrentLimit(r)
		var mult uint32
		if got.UnitMultiplier != nil {
			mult = got.UnitMultiplier.Value
		}
		if got.Name != "r" || got.RequestsPerUnit != tt.rpu || got.Unit != tt.unit || mult != tt.mult {
			t.Errorf("CurrentLimit(%d per %s) = %d per %s × %d, want %d per %s × %d",
				tt.limit, tt.window, got.RequestsPerUnit, got.Unit, mult, tt.rpu, tt.unit, tt.mult)
		}
	}
}
