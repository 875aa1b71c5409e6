package rules

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
)

func validRule() Rule {
	return Rule{ID: "free-per-user", Limit: 100, Window: Duration(time.Minute)}
}

func ptr[T any](v T) *T { return &v }

func TestRuleValidate(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(r *Rule)
		field string // "" = valid
		msg   string // substring of the message
	}{
		{"minimal", func(r *Rule) {}, "", ""},
		{"full", func(r *Rule) {
			r.Description = "Free plan\n\t100 a minute"
			r.Match = Match{Plan: "Free_1.x", Endpoint: "* /api/*"}
			r.By, r.Burst, r.Algorithm = ByAPIKey, 200, algorithm.LeakyBucket
			r.FailureMode, r.Shadow, r.Enabled = FailClosed, true, ptr(false)
		}, "", ""},
		{"id empty", func(r *Rule) { r.ID = "" }, "id", "required"},
		{"id uppercase", func(r *Rule) { r.ID = "Free" }, "id", `got "Free"`},
		{"id leading dash", func(r *Rule) { r.ID = "-x" }, "id", "starting with a letter or digit"},
		{"id too long", func(r *Rule) { r.ID = strings.Repeat("a", 65) }, "id", "1 to 64"},
		{"id 64", func(r *Rule) { r.ID = strings.Repeat("a", 64) }, "", ""},
		{"id non-ascii", func(r *Rule) { r.ID = "aš" }, "id", "a-z 0-9"},
		{"description long", func(r *Rule) { r.Description = strings.Repeat("x", 1025) }, "description", "at most 1024 bytes"},
		{"description control", func(r *Rule) { r.Description = "a\x00b" }, "description", "control"},
		{"charge after_response, token bucket", func(r *Rule) { r.Charge, r.Algorithm = ChargeAfterResponse, algorithm.TokenBucket }, "", ""},
		{"charge after_response, leaky bucket", func(r *Rule) { r.Charge, r.Algorithm = ChargeAfterResponse, algorithm.LeakyBucket }, "", ""},
		{"charge after_response, fixed window", func(r *Rule) { r.Charge, r.Algorithm = ChargeAfterResponse, algorithm.FixedWindow }, "", ""},
		{"charge request", func(r *Rule) { r.Charge, r.Algorithm = ChargeRequest, algorithm.SlidingLog }, "", ""},
		{"charge sliding window", func(r *Rule) { r.Charge, r.Algorithm = ChargeAfterResponse, algorithm.SlidingWindow }, "charge", "no debt a later window pays back"},
		{"charge sliding log", func(r *Rule) { r.Charge, r.Algorithm = ChargeAfterResponse, algorithm.SlidingLog }, "charge", "change the algorithm or remove charge"},
		{"charge unknown", func(r *Rule) { r.Charge = "later" }, "charge", `must be request or after_response, got "later"`},
		{"charge unlimited", func(r *Rule) { r.Charge, r.Unlimited, r.Limit, r.Window = ChargeAfterResponse, true, 0, 0 }, "charge", "takes no charge"},
		{"charge unknown, unlimited", func(r *Rule) { r.Charge, r.Unlimited, r.Limit, r.Window = "x", true, 0, 0 }, "charge", "must be request or after_response"},
		{"description bad utf8", func(r *Rule) { r.Description = "a\xffb" }, "description", "UTF-8"},
		{"plan bad", func(r *Rule) { r.Match.Plan = "free plan" }, "match.plan", `got "free plan"`},
		{"endpoint without method", func(r *Rule) { r.Match.Endpoint = "/api/orders" }, "match.endpoint", `want "METHOD /path", e.g. "GET /api/orders"`},
		{"endpoint lowercase method", func(r *Rule) { r.Match.Endpoint = "get /x" }, "match.endpoint", "uppercase"},
		{"by", func(r *Rule) { r.By = "session" }, "by", `must be one of client, user, api_key, ip, global, endpoint, header:<name>, entry:<key>, or several joined by "+" such as api_key+endpoint, got "session"`},
		{"limit 0 denies every call", func(r *Rule) { r.Limit = 0 }, "", ""},
		{"limit 0 with burst", func(r *Rule) { r.Limit, r.Burst = 0, 3 }, "burst", "a rule of limit 0 denies every call: remove burst (got 3)"},
		{"limit 0 sliding_log", func(r *Rule) { r.Limit, r.Algorithm = 0, algorithm.SlidingLog }, "", ""},
		{"limit negative", func(r *Rule) { r.Limit = -5 }, "limit", "must be ≥ 0 (0 denies every call), got -5"},
		{"unlimited", func(r *Rule) { r.Unlimited, r.Limit, r.Window = true, 0, 0 }, "", ""},
		{"unlimited with limit", func(r *Rule) { r.Unlimited = true }, "limit", "an unlimited rule admits every call: remove limit (got 100) or unlimited"},
		{"unlimited with window", func(r *Rule) { r.Unlimited, r.Limit = true, 0 }, "window", "an unlimited rule admits every call: remove window (got 1m) or unlimited"},
		{"unlimited with burst", func(r *Rule) { r.Unlimited, r.Limit, r.Window, r.Burst = true, 0, 0, 4 }, "burst", "an unlimited rule admits every call: remove burst (got 4) or unlimited"},
		{"name", func(r *Rule) { r.Name, r.Replaces = "Per User Limit", []string{"other limit", "x"} }, "", ""},
		{"name long", func(r *Rule) { r.Name = strings.Repeat("n", maxName+1) }, "name", "must be at most 128 bytes, got 129"},
		{"replaces itself", func(r *Rule) { r.Name, r.Replaces = "x", []string{"x"} }, "replaces[0]", `"x" is the rule's own name: a rule does not replace itself; remove it`},
		{"replaces empty", func(r *Rule) { r.Replaces = []string{"a", ""} }, "replaces[1]", "want the name of a rule, got an empty string"},
		{"replaces too many", func(r *Rule) { r.Replaces = make([]string, maxReplaces+1) }, "replaces", "at most 32 names, got 33"},
		{"limit max", func(r *Rule) { r.Limit = 1e9 }, "", ""},
		{"limit over", func(r *Rule) { r.Limit = 1e9 + 1 }, "limit", "must be ≤ 1000000000"},
		{"window missing", func(r *Rule) { r.Window = 0 }, "window", "required"},
		{"window short", func(r *Rule) { r.Window = Duration(500 * time.Microsecond) }, "window", "must be ≥ 1ms, got 500us"},
		{"window 1ms", func(r *Rule) { r.Window = Duration(time.Millisecond) }, "", ""},
		{"window 366d", func(r *Rule) { r.Window = Duration(366 * day) }, "", ""},
		{"window long", func(r *Rule) { r.Window = Duration(367 * day) }, "window", "must be ≤ 366d, got 367d"},
		{"window fraction of µs", func(r *Rule) { r.Window = Duration(time.Second + 1) }, "window", "whole number of microseconds"},
		{"burst negative", func(r *Rule) { r.Burst = -1 }, "burst", "must be ≥ 0"},
		{"burst over", func(r *Rule) { r.Burst = 1e9 + 1 }, "burst", "must be ≤ 1000000000"},
		{"burst on fixed_window", func(r *Rule) { r.Algorithm, r.Burst = algorithm.FixedWindow, 10 }, "burst", "only token_bucket and leaky_bucket take a burst; fixed_window"},
		{"burst on sliding_log", func(r *Rule) { r.Algorithm, r.Burst = algorithm.SlidingLog, 10 }, "burst", "only token_bucket and leaky_bucket"},
		{"burst 0 on fixed_window", func(r *Rule) { r.Algorithm = algorithm.FixedWindow }, "", ""},
		{"unknown algorithm", func(r *Rule) { r.Algorithm = 9 }, "algorithm", "want one of token_bucket, leaky_bucket"},
		{"sliding_log at cap", func(r *Rule) { r.Algorithm, r.Limit = algorithm.SlidingLog, algorithm.MaxLogLimit }, "", ""},
		{"sliding_log over cap", func(r *Rule) { r.Algorithm, r.Limit = algorithm.SlidingLog, algorithm.MaxLogLimit+1 }, "limit", "must be ≤ 10000 for sliding_log"},
		{"failure_mode", func(r *Rule) { r.FailureMode = "half" }, "failure_mode", `must be open or closed, got "half"`},
		// Issue 12 item 7: rules whose full refill outlasts what the
		// algorithms keep exact are refused, naming the bound.
		{"leaky refill 300000 years", func(r *Rule) {
			r.Algorithm, r.Limit, r.Window, r.Burst = algorithm.LeakyBucket, 1, Duration(366*day), 300000
		}, "burst", "(burst + 1) × window / limit, the time an emptied meter takes to drain, is 109800366.0d: must be at most 14640d (40 × 366d)"},
		{"leaky burst 1e9", func(r *Rule) {
			r.Algorithm, r.Limit, r.Window, r.Burst = algorithm.LeakyBucket, 1, Duration(day), 1e9
		}, "burst", "must be at most 14640d"},
		{"leaky refill 40 years", func(r *Rule) {
			r.Algorithm, r.Limit, r.Window, r.Burst = algorithm.LeakyBucket, 1, Duration(366*day), 39
		}, "", ""},
		{"token refill 143 years", func(r *Rule) {
			r.Limit, r.Window, r.Burst = 7, Duration(366*day), 1000
		}, "burst", "burst × window / limit, the time an empty bucket takes to refill, is 52285.7d: must be at most 14640d (40 × 366d); lower burst or window, or raise limit"},
		{"token refill 40 years", func(r *Rule) { r.Limit, r.Window, r.Burst = 1, Duration(366*day), 40 }, "", ""},
		{"token refill 40 years and 1µs", func(r *Rule) { r.Limit, r.Window, r.Burst = 1_000_000_000, Duration(366*day), 1_000_000_000 }, "", ""},
		{"token burst 1e9 a second", func(r *Rule) { r.Limit, r.Window, r.Burst = 1, Duration(time.Second), 1e9 }, "", ""}, // 11574 days
		{"token burst 1e9 a day", func(r *Rule) { r.Limit, r.Window, r.Burst = 1, Duration(day), 1e9 }, "burst", "must be at most 14640d"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := validRule()
			tt.edit(&r)
			err := r.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Validate() = %v, want a *FieldError", err)
			}
			if fe.Field != tt.field || !strings.Contains(fe.Message, tt.msg) {
				t.Errorf("Validate() = %q, want field %q with message containing %q", err, tt.field, tt.msg)
			}
			if want := fe.Field + ": " + fe.Message; err.Error() != want {
				t.Errorf("Error() = %q, want %q", err, want)
			}
		})
	}
}

func TestSetValidate(t *testing.T) {
	base := func() *Set {
		return &Set{
			DefaultPlan: "free",
			Rules: []Rule{
				{ID: "a", Limit: 1, Window: Duration(time.Second)},
				{ID: "b", Limit: 1, Window: Duration(time.Second)},
				{ID: "free-per-user", Limit: 1, Window: Duration(time.Second)},
			},
			Clients: map[string]Client{"user:alice": {Plan: "pro"}, "ip:2001:db8::/64": {Plan: "free"}},
		}
	}
	tests := []struct {
		name string
		edit func(s *Set)
		want string // full Error(); "" = valid
	}{
		{"valid", func(s *Set) {}, ""},
		{"zero", func(s *Set) { *s = Set{} }, ""},
		{"rule field", func(s *Set) { s.Rules[2].Limit = -1 }, `rules[2] (id "free-per-user").limit: must be ≥ 0 (0 denies every call), got -1`},
		{"rule nested field", func(s *Set) { s.Rules[1].Match.Endpoint = "/api/orders" },
			`rules[1] (id "b").match.endpoint: want "METHOD /path", e.g. "GET /api/orders"`},
		{"rule without id", func(s *Set) { s.Rules[0].ID = "" }, `rules[0].id: required`},
		{"duplicate id", func(s *Set) { s.Rules[2].ID = "a" }, `rules[2] (id "a").id: duplicate of rules[0]`},
		{"default plan", func(s *Set) { s.DefaultPlan = "no good" }, `default_plan: must be 1 to 64 of A-Z a-z 0-9 . _ - starting with a letter or digit, got "no good"`},
		{"revision", func(s *Set) { s.Revision = -1 }, `revision: must be ≥ 0, got -1`},
		{"client id", func(s *Set) { s.Clients["alice"] = Client{Plan: "pro"} },
			`clients["alice"]: want "user:<id>", "api_key:<key>" or "ip:<address or prefix>", got "alice"`},
		{"client plan missing", func(s *Set) { s.Clients["api_key:k"] = Client{} }, `clients["api_key:k"].plan: required`},
		{"client plan bad", func(s *Set) { s.Clients["api_key:k"] = Client{Plan: "-x"} }, `clients["api_key:k"].plan: must be 1 to 64`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := base()
			tt.edit(s)
			err := s.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Validate() = %v, want a *FieldError", err)
			}
			if !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("Validate() = %q, want %q", err, tt.want)
			}
		})
	}
}

func TestValidClientID(t *testing.T) {
	tests := []struct {
		id   string
		want string // substring of the error; "" = valid
	}{
		{"user:alice", ""},
		{"api_key:k_live_42", ""},
		{"user:名前", ""},
		{"user:a b", ""},
		{"ip:203.0.113.7", ""},
		{"ip:2001:db8::1", ""},
		{"ip:2001:db8::/64", ""},
		{"ip:10.0.0.0/8", ""},
		{"alice", `want "user:<id>"`},
		{"session:x", `want "user:<id>"`},
		{"USER:x", `want "user:<id>"`},
		{"user:", `want a value after "user:"`},
		{"user:" + strings.Repeat("x", 256), ""},
		{"user:" + strings.Repeat("x", 257), "257 bytes, want at most 256"},
		{"user:a\nb", "control character"},
		{"user:\xff", "UTF-8"},
		{"ip:bogus", "want an IP address or prefix"},
		{"ip:2001:DB8::1", `canonical form, "ip:2001:db8::1"`},
		{"ip:10.1.2.3/8", `canonical form, "ip:10.0.0.0/8"`},
		{"ip:fe80::1%eth0", "want an IP address"},
		// Digests, as package identity builds them.
		{"user:h:0123456789abcdef0123456789abcdef", ""},
		{"api_key:h:17b16d8ef494060fefa36a6a41567b8c", ""},
		{"user:h:alice", `a value starting with "h:" names a digest: want "h:" and 32 lowercase hex digits`},
		{"api_key:h:0123456789ABCDEF0123456789ABCDEF", `names a digest`},
		{"user:h:0123456789abcdef0123456789abcdef0", `names a digest`},
	}
	for _, tt := range tests {
		checkErr(t, fmt.Sprintf("validClientID(%q)", tt.id), validClientID(tt.id), tt.want)
	}
}

// checkErr fails the test unless call, which returned err, succeeded when
// want is "" and else failed with an error containing want.
func checkErr(t *testing.T, call string, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s = %v, want nil", call, err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Errorf("%s = %v, want an error containing %q", call, err, want)
	}
}

func TestDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		out  string
	}{
		{"1m", time.Minute, "1m"},
		{"60s", time.Minute, "1m"},
		{"1s", time.Second, "1s"},
		{"24h", day, "24h"},
		{"1d", day, "24h"},
		{"7d", 7 * day, "7d"},
		{"168h", 7 * day, "7d"},
		{"1d12h", 36 * time.Hour, "36h"},
		{"500ms", 500 * time.Millisecond, "500ms"},
		{"1.5s", 1500 * time.Millisecond, "1500ms"},
		{"90s", 90 * time.Second, "90s"},
		{"1h30m", 90 * time.Minute, "90m"},
		{"250us", 250 * time.Microsecond, "250us"},
		{"250µs", 250 * time.Microsecond, "250us"},
		{"1500ns", 1500, "1500ns"},
		{"0", 0, "0s"},
		{"0d", 0, "0s"},
		{"-1m", -time.Minute, "-1m"},
		{"366d", 366 * day, "366d"},
	}
	for _, tt := range tests {
		d, err := parseDuration(tt.in)
		if err != nil || time.Duration(d) != tt.want {
			t.Errorf("parseDuration(%q) = %v, %v, want %v", tt.in, time.Duration(d), err, tt.want)
			continue
		}
		if got := d.String(); got != tt.out {
			t.Errorf("Duration(%v).String() = %q, want %q", tt.want, got, tt.out)
		}
		back, err := parseDuration(d.String())
		if err != nil || back != d {
			t.Errorf("parseDuration(%q) = %v, %v, want %v", d.String(), back, err, d)
		}
	}
	for _, in := range []string{"", "d", "1", "1x", "1D", "1.5d", "1d-5h", "1d+5h", "d1", "m", "1m1d", "--1m", "99999999999999d", "1d 1h"} {
		if d, err := parseDuration(in); err == nil {
			t.Errorf("parseDuration(%q) = %v, want an error", in, d)
		}
	}
	var d Duration
	if err := d.UnmarshalText([]byte("fast")); err == nil || !strings.Contains(err.Error(), `got "fast"`) {
		t.Errorf("UnmarshalText(fast) = %v, want an error naming the value", err)
	}
}

func TestRuleParams(t *testing.T) {
	r := Rule{ID: "x", Limit: 5, Window: Duration(1500 * time.Millisecond), Burst: 7, Algorithm: algorithm.LeakyBucket}
	want := algorithm.Params{Kind: algorithm.LeakyBucket, Limit: 5, Window: 1_500_000, Burst: 7}
	if got := r.Params(); got != want {
		t.Errorf("Params() = %+v, want %+v", got, want)
	}
	if !r.IsEnabled() {
		t.Error("IsEnabled() with Enabled nil = false, want true")
	}
	r.Enabled = ptr(false)
	if r.IsEnabled() {
		t.Error("IsEnabled() with Enabled false = true, want false")
	}
}

func TestClone(t *testing.T) {
	s := &Set{
		Revision: 3,
		Rules:    []Rule{{ID: "a", Limit: 1, Window: Duration(time.Second), Enabled: ptr(true)}},
		Clients:  map[string]Client{"user:a": {Plan: "p"}},
	}
	c := s.Clone()
	*c.Rules[0].Enabled = false
	c.Rules[0].Limit = 9
	c.Clients["user:a"] = Client{Plan: "q"}
	if !*s.Rules[0].Enabled || s.Rules[0].Limit != 1 || s.Clients["user:a"].Plan != "p" {
		t.Errorf("changing the clone changed the original: %+v", s)
	}
	if (*Set)(nil).Clone() != nil {
		t.Error("nil.Clone() != nil")
	}
}

// TestChargeYAML: charge is read from and written to the rules file, and
// reaches the algorithm's params.
func TestChargeYAML(t *testing.T) {
	s, err := ParseYAML([]byte("rules:\n  - {id: tokens, by: user, limit: 10000, window: 1m, charge: after_response}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r := s.Rules[0]; r.Charge != ChargeAfterResponse || !r.Params().Charge {
		t.Fatalf("charge = %q, params %+v; want after_response, Charge true", r.Charge, r.Params())
	}
	out, err := EncodeYAML(s)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseYAML(out)
	if err != nil || back.Rules[0].Charge != ChargeAfterResponse {
		t.Fatalf("EncodeYAML then ParseYAML = %+v, %v (from %s), want the charge kept", back, err, out)
	}
	if _, err := ParseYAML([]byte("rules:\n  - {id: x, limit: 1, window: 1m, algorithm: sliding_window, charge: after_response}\n")); err == nil || !strings.Contains(err.Error(), "charge") {
		t.Fatalf("a charge on sliding_window = %v, want refused naming charge", err)
	}
}
