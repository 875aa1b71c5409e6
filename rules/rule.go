// Package rules holds sluice's rate-limit rules: the model carried by the
// rules file and the admin API, its validation, strict parsing of outside
// input (JSON and YAML), and the compiled Index that the hot path matches
// each request against.
//
// A Set is plain data: build one, Validate it, then Compile it into an Index.
// An Index is immutable; to change the rules, compile a new one and swap it
// in (an atomic.Pointer[Index] is the intended holder).
//
// # Paths
//
// Rules match a request path in its clean form, the same for every entry
// point (the decision API, the Envoy API, the gateway and the middleware)
// and for the paths of endpoint patterns:
//
//   - the query and fragment are dropped (from the first "?" or "#");
//   - each segment loses its parameters, from a ";" to the end of the
//     segment ("/api/orders;jsessionid=1" is "/api/orders", "/a/..;/b" is
//     "/b"), as Tomcat and Spring route;
//   - percent escapes ("%6f", "%2F", "%2e") are decoded, once; a decoded
//     "/" separates segments; an escape that is not "%" and two hex
//     digits stays as it is;
//   - empty segments and "." are dropped and ".." removes the segment
//     before it (never above the root), so "//api/orders", "/api/orders/",
//     "/api//orders", "/api/./orders" and "/api/x/../orders" are all
//     "/api/orders";
//   - the result starts with "/" and has no trailing "/" ("/" alone for
//     the root).
//
// "" stays "" (a call without a path). Letter case is kept: a rule asks
// for case-insensitive matching with match.path_case.
package rules

import (
	"maps"
	"slices"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/identity"
	"github.com/sluicehq/sluice/internal/ruleid"
)

// Limits on rule fields. They bound what a rule can ask of the counter
// store and keep every value exact in the microsecond arithmetic of the
// algorithms.
const (
	maxLimit         = algorithm.MaxLimit   // largest limit and burst
	minWindow        = time.Millisecond     // shortest window
	maxWindow        = 366 * 24 * time.Hour // longest window
	maxDescription   = 1024                 // bytes
	maxClientIDValue = identity.MaxValue    // bytes after "user:", "api_key:" or "ip:"
)

const (
	maxIDLen          = ruleid.MaxLen
	validAlgorithmSet = "token_bucket, leaky_bucket, fixed_window, sliding_window, sliding_log"
)

// By names the identity a rule's buckets are keyed by. The zero value ""
// means ByClient.
type By string

const (
	ByClient By = "client"  // the user if known, else the API key, else the IP; "" means ByClient
	ByUser   By = "user"    // the logged-in user
	ByAPIKey By = "api_key" // the API key
	ByIP     By = "ip"      // the caller's address (IPv6 by prefix)
)

// Valid reports whether b is a `by` a rule may have: one of the four
// identities, empty, or any other form listed at ByGlobal.
func (b By) Valid() bool {
	_, err := parseBy(b)
	return err == nil
}

// FailureMode says what a rule does while the shared counter store is
// unreachable. The zero value "" means FailOpen.
type FailureMode string

const (
	FailOpen   FailureMode = "open"   // serve from a coarse in-process limit; "" means FailOpen
	FailClosed FailureMode = "closed" // deny
)

// Valid reports whether m is open, closed or empty.
func (m FailureMode) Valid() bool {
	switch m {
	case "", FailOpen, FailClosed:
		return true
	}
	return false
}

// Charge says what a call's cost on a rule is. ChargeRequest (the default,
// "") asks for that much and takes nothing when it does not fit: a denied
// call consumes nothing. ChargeAfterResponse is a charge for work already
// done — Envoy's apply_on_stream_done report of a call's real cost, the
// way AI gateways count tokens — taken in full even when it does not fit,
// into debt, so that the calls after it are denied until the debt is paid
// back (algorithm.Params.Charge). A call of cost 0, the check before the
// work, is decided as always. token_bucket, leaky_bucket and fixed_window
// only (algorithm.CanCharge).
type Charge string

const (
	ChargeRequest       Charge = "request"
	ChargeAfterResponse Charge = "after_response"
)

// LeaseMode says whether an instance may decide a rule's hot buckets from
// a batch of tokens it leased from the shared store (see docs/redis.md,
// "Leases for hot buckets"). The zero value "" means LeaseAuto.
type LeaseMode string

const (
	LeaseAuto LeaseMode = "auto" // lease a bucket this instance decides often; "" means LeaseAuto
	LeaseOff  LeaseMode = "off"  // one round trip per decision, always
	LeaseOn   LeaseMode = "on"   // lease from the first decision
)

// Valid reports whether m is auto, off, on or empty.
func (m LeaseMode) Valid() bool {
	switch m {
	case "", LeaseAuto, LeaseOff, LeaseOn:
		return true
	}
	return false
}

// Match selects the calls a rule applies to: a call must fit every field
// that is set. An empty field matches anything: a rule with no plan applies
// to every plan (and to callers with none), a rule with no endpoint to
// every method and path, a rule with no headers or domain to every call.
//
// Endpoint is "METHOD /path": an uppercase HTTP method (at most 16
// letters), up to 16 of them joined by "|" (each once), or "*" for any;
// exactly one space; a path starting with "/". A path ending in "/*" is a
// prefix: "* /api/*" matches /api and everything under it, "/*" every
// path; no other "*" may appear. No whitespace or control characters, at
// most 512 bytes of UTF-8. The endpoint's path and the call's are compared
// in their clean form (see Paths in the package doc), with letter case
// unless PathCase is insensitive; methods are compared without regard to
// case, and a rule on GET (alone or in a method set such as "GET|POST")
// also applies to HEAD.
//
// Headers maps request header names to the value a call must carry:
// "acme" (exactly), "prod-*" (starting with "prod-") or "*" (any value).
// Names compare without regard to case, values exactly; a call's first
// value of the header is compared, and a call without it does not fit. Only the
// gateway and the middleware see a call's headers; a rule with headers
// never applies to the decision API or the Envoy API.
//
// Domain is the Envoy rate limit service domain (the domain of a
// ShouldRateLimit request). A rule that names one applies only to calls
// made through the Envoy API in that domain, never to the HTTP decision
// API, which has no domain.
type Match struct {
	Domain   string            `json:"domain,omitempty" yaml:"domain,omitempty"` // same syntax as a plan
	Plan     string            `json:"plan,omitempty" yaml:"plan,omitempty"`
	Endpoint string            `json:"endpoint,omitempty" yaml:"endpoint,omitempty"`   // "GET /api/orders", "* /api/*", "POST /login"
	PathCase PathCase          `json:"path_case,omitempty" yaml:"path_case,omitempty"` // insensitive: "/API/Orders" fits "GET /api/orders"
	Headers  map[string]string `json:"headers,omitempty" yaml:"headers,omitempty"`     // {"X-Tenant": "acme", "X-Env": "prod-*", "X-Internal": "*"}
	// Entries, when set, select the Envoy descriptors made of exactly these
	// entries, in order (see Entry and Index.MatchEntries): such a rule
	// applies only through the Envoy API, and names no plan or endpoint.
	Entries []Entry `json:"entries,omitempty" yaml:"entries,omitempty"`
}

// PathCase says whether a rule's endpoint path compares with letter case.
// The zero value "" means PathCaseSensitive.
type PathCase string

const (
	PathCaseSensitive   PathCase = "sensitive"   // "/API/orders" is not "/api/orders"; "" means sensitive
	PathCaseInsensitive PathCase = "insensitive" // ASCII letters compare without case, for upstreams that route so
)

// Valid reports whether c is sensitive, insensitive or empty.
func (c PathCase) Valid() bool {
	switch c {
	case "", PathCaseSensitive, PathCaseInsensitive:
		return true
	}
	return false
}

// Rule is one limit: which calls it applies to (Match), whose bucket it
// counts in (By), and how many calls per Window it admits with which
// algorithm. The zero value is not valid: ID and Window are required.
// Limit 0 admits no call: every call the rule applies to is denied (with
// reason cost_exceeds_capacity: it never passes), as envoyproxy/ratelimit's
// requests_per_unit: 0 does.
//
// An Unlimited rule has no Limit, Window or Burst: it applies to its calls
// like any rule but counts and limits nothing. On match.entries it is the
// match of the descriptors it selects, so a less specific descriptor's
// rule does not apply to them (see Index.MatchEntries), and the Envoy API
// answers such a descriptor OK with no limit (envoyproxy/ratelimit's
// unlimited: true).
//
// Name and Replaces are envoyproxy/ratelimit's rate_limit.name and
// replaces: when a rule that replaces a name applies to a call (or, through
// the Envoy API, to any descriptor of the request), the rules with that
// Name do not apply to it — they neither count nor limit it. Names need not
// be unique; a name no rule has replaces nothing.
//
// Quota is envoyproxy/ratelimit's quota_mode, read by the Envoy API: a
// quota rule over its limit denies a request only when every quota rule
// the request's descriptors match is over its limit too (and through the
// HTTP API, where a call has one descriptor, it denies as any rule).
//
// A Rule is plain data; copy it freely, but note that Enabled is a pointer
// and Replaces and Match.Entries are slices.
type Rule struct {
	ID          string         `json:"id" yaml:"id"` // [a-z0-9][a-z0-9._-]{0,63}
	Description string         `json:"description,omitempty" yaml:"description,omitempty"`
	Match       Match          `json:"match" yaml:"match,omitempty"`
	By          By             `json:"by,omitempty" yaml:"by,omitempty"`
	Limit       int64          `json:"limit" yaml:"limit"`
	Window      Duration       `json:"window" yaml:"window"`
	Burst       int64          `json:"burst,omitempty" yaml:"burst,omitempty"` // 0 = the algorithm's default; bucket algorithms only
	Algorithm   algorithm.Kind `json:"algorithm" yaml:"algorithm"`
	// MaxReserveWait caps how far ahead a reservation (POST
	// /ratelimit/reserve, Limiter.Reserve) may be granted on this rule's
	// buckets: a caller asking to wait longer is refused as one whose
	// max_wait_ms is this. 0 means one hour, the most any reservation
	// waits. Bucket algorithms only, since only they reserve.
	MaxReserveWait Duration    `json:"max_reserve_wait,omitempty" yaml:"max_reserve_wait,omitempty"`
	FailureMode    FailureMode `json:"failure_mode,omitempty" yaml:"failure_mode,omitempty"`
	Charge         Charge      `json:"charge,omitempty" yaml:"charge,omitempty"`   // "" = request
	Lease          LeaseMode   `json:"lease,omitempty" yaml:"lease,omitempty"`     // "" = auto; see LeaseMode
	Shadow         bool        `json:"shadow,omitempty" yaml:"shadow,omitempty"`   // evaluate and report, never deny
	Quota          bool        `json:"quota,omitempty" yaml:"quota,omitempty"`     // Envoy API: denies only with every other quota rule of the request (envoyproxy/ratelimit's quota_mode)
	Enabled        *bool       `json:"enabled,omitempty" yaml:"enabled,omitempty"` // nil = true
	Unlimited      bool        `json:"unlimited,omitempty" yaml:"unlimited,omitempty"`
	Name           string      `json:"name,omitempty" yaml:"name,omitempty"`         // what Replaces name; the Envoy API's current_limit.name
	Replaces       []string    `json:"replaces,omitempty" yaml:"replaces,omitempty"` // names of the rules this one overrides
}

// maxReserveWait is the longest a reservation may wait, and the largest
// Rule.MaxReserveWait: one hour.
const maxReserveWait = Duration(time.Hour)

// Limits on name and replaces.
const (
	maxName     = 128 // bytes of a rule's name
	maxReplaces = 32  // names in one rule's replaces
)

// IsEnabled reports whether the rule is in force (Enabled nil or true).
func (r *Rule) IsEnabled() bool { return r.Enabled == nil || *r.Enabled }

// Params returns the parts of the rule the algorithm reads, with Window in
// microseconds.
func (r *Rule) Params() algorithm.Params {
	return algorithm.Params{
		Kind:   r.Algorithm,
		Limit:  r.Limit,
		Window: time.Duration(r.Window).Microseconds(),
		Burst:  r.Burst,
		Charge: r.Charge == ChargeAfterResponse,
	}
}

// Client is an entry of the client registry: the plan a known client is on.
// The zero value is not valid; Plan is required.
type Client struct {
	Plan string `json:"plan" yaml:"plan"`
}

// Set is the whole rule configuration: what the rules file holds and what
// the admin API edits. Rules apply in order; Clients maps a client id
// ("user:<id>", "api_key:<key>" or "ip:<address or prefix>", which
// Validate checks) to its plan; callers not in Clients get DefaultPlan. The
// zero value is an empty, valid configuration. A Set is plain data with no
// locking: share it read-only or Clone it.
type Set struct {
	Revision    int64             `json:"revision" yaml:"revision,omitempty"`
	DefaultPlan string            `json:"default_plan,omitempty" yaml:"default_plan,omitempty"`
	Rules       []Rule            `json:"rules" yaml:"rules"`
	Clients     map[string]Client `json:"clients,omitempty" yaml:"clients,omitempty"`
}

// Clone returns a deep copy of s (nil for nil).
func (s *Set) Clone() *Set {
	if s == nil {
		return nil
	}
	c := *s
	if s.Rules != nil {
		c.Rules = make([]Rule, len(s.Rules))
		for i, r := range s.Rules {
			if r.Enabled != nil {
				e := *r.Enabled
				r.Enabled = &e
			}
			r.Replaces = slices.Clone(r.Replaces)
			r.Match.Entries = slices.Clone(r.Match.Entries)
			if r.Match.Headers != nil {
				r.Match.Headers = maps.Clone(r.Match.Headers)
			}
			c.Rules[i] = r
		}
	}
	if s.Clients != nil {
		c.Clients = make(map[string]Client, len(s.Clients))
		for k, v := range s.Clients {
			c.Clients[k] = v
		}
	}
	return &c
}
