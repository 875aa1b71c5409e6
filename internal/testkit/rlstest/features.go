package rlstest

import (
	"math"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// Features is an envoyproxy/ratelimit configuration, domain feat, written
// for this project with the features of its README's examples 3, 5 and 7
// and of its example configuration: unlimited, requests_per_unit 0, a
// descriptor without rate_limit next to its key, name and replaces (also
// from an unlimited descriptor). Every limit in it is per hour. Imported,
// its rules are feat.1 (client, 3), feat.4 (client banned, 0),
// member_north (area north, member, 2) and feat.6 (area south, member, 4,
// replacing member_north).
const Features = `domain: feat
descriptors:
  - key: client
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: client
    value: internal
    rate_limit: {unlimited: true}
  - key: client
    value: trusted
  - key: client
    value: banned
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: area
    value: north
    descriptors:
      - key: member
        rate_limit: {name: member_north, unit: hour, requests_per_unit: 2}
  - key: area
    value: south
    descriptors:
      - key: member
        rate_limit:
          replaces: [{name: member_north}]
          unit: hour
          requests_per_unit: 4
  - key: vip
    rate_limit:
      unlimited: true
      replaces: [{name: member_north}]
`

// Status is a descriptor's status as a test of Features wants it.
type Status struct {
	Code      rlsv3.RateLimitResponse_Code
	Limited   bool // a current_limit
	Limit     uint32
	Remaining uint32
	Name      string // the current_limit's
}

// A descriptor's status when no limit applies to it (NoLimit) and when it
// is unlimited (Unlimited: OK with limit_remaining 4294967295 and no
// current_limit, as envoyproxy/ratelimit answers).
var (
	NoLimit   = Status{Code: rlsv3.RateLimitResponse_OK}
	Unlimited = Status{Code: rlsv3.RateLimitResponse_OK, Remaining: math.MaxUint32}
)

// Limited is the status of a descriptor with code under the current_limit
// named name of limit calls, remaining left.
func Limited(code rlsv3.RateLimitResponse_Code, limit, remaining uint32, name string) Status {
	return Status{Code: code, Limited: true, Limit: limit, Remaining: remaining, Name: name}
}

// CheckFeatures fails the test unless resp, the answer to a request under
// Features, has a status per want, each as want says, with a
// duration_until_reset in (0, 1h] and the unit HOUR where it has a
// current_limit and no duration_until_reset where not; and unless its
// overall code is OVER_LIMIT where a want is, else OK. step names the
// request in the failures.
func CheckFeatures(t testing.TB, step string, resp *rlsv3.RateLimitResponse, want []Status) {
	t.Helper()
	if len(resp.Statuses) != len(want) {
		t.Fatalf("%s: %d statuses, want %d", step, len(resp.Statuses), len(want))
	}
	overall := rlsv3.RateLimitResponse_OK
	for j, w := range want {
		if w.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			overall = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		st := resp.Statuses[j]
		cl := st.GetCurrentLimit()
		got := Status{st.Code, cl != nil, cl.GetRequestsPerUnit(), st.LimitRemaining, cl.GetName()}
		if got != w {
			t.Errorf("%s, descriptor %d: %+v, want %+v", step, j, got, w)
		}
		reset := st.GetDurationUntilReset().AsDuration()
		switch {
		case cl == nil && st.DurationUntilReset != nil:
			t.Errorf("%s, descriptor %d: duration_until_reset %v without a limit", step, j, reset)
		case cl != nil && (cl.Unit != rlsv3.RateLimitResponse_RateLimit_HOUR || reset <= 0 || reset > time.Hour):
			t.Errorf("%s, descriptor %d: unit %v, duration_until_reset %v, want HOUR and (0, 1h]", step, j, cl.Unit, reset)
		}
	}
	if resp.OverallCode != overall {
		t.Errorf("%s: overall %v, want %v", step, resp.OverallCode, overall)
	}
}
