package rls

import (
	"math"
	"strconv"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/clientkey"
	"github.com/sluicehq/sluice/internal/seam/descriptor"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
)

// Bounds on a ShouldRateLimit request. Envoy sends one descriptor per
// rate_limits entry of a route, each with a few entries.
const (
	MaxDescriptors = 32            // descriptors per request
	MaxEntries     = 32            // entries per descriptor
	MaxHitsAddend  = 1_000_000_000 // hits_addend beyond every rule's capacity from here on (algorithm.MaxLimit)
	MaxDomain      = 256           // bytes of the domain
)

// overCost is the cost of a hits_addend past MaxHitsAddend: above the
// capacity of every rule (at most algorithm.MaxLimit + 1), so such a call is
// denied for cost_exceeds_capacity, and far from overflowing when the
// costs of 32 descriptors add up on one bucket.
const overCost = 1 << 32

// Descriptor entry keys sluice reads; other keys are ignored.
const (
	KeyUser          = "user"
	KeyAPIKey        = "api_key"
	KeyRemoteAddress = "remote_address" // what Envoy's remote_address action sends
	KeyIP            = "ip"             // the same, for request_headers actions
	KeyPlan          = "plan"
	KeyMethod        = "method"
	KeyPath          = "path"
)

// call is one descriptor read as a sluice check. desc, attached to req, is
// the descriptor's entries, every key (rules on match.entries and rules
// keyed by entry:<key> read them), held in entries, and its own limit.
type call struct {
	req     limiter.Request
	desc    descriptor.Descriptor
	entries [MaxEntries]rules.Entry
	// empty: the descriptor has no entries (Envoy sends one when every
	// action of a rate_limits entry is skip_if_absent and absent). It is
	// OK and counts nothing.
	empty bool
}

// field indexes the mapped entries of a call, for merging.
type field uint8

const (
	fUser field = iota
	fAPIKey
	fIP
	fPlan
	fMethod
	fPath
	nFields
)

func (c *call) field(f field) *string {
	switch f {
	case fUser:
		return &c.req.User
	case fAPIKey:
		return &c.req.APIKey
	case fIP:
		return &c.req.IP
	case fPlan:
		return &c.req.Plan
	case fMethod:
		return &c.req.Method
	}
	return &c.req.Path
}

// invalid is the error of a malformed request.
func invalid(msg string) error { return status.Error(codes.InvalidArgument, "rls: "+msg) }

// parse validates req and reads each descriptor into calls (len(calls) ==
// len(req.Descriptors)). The error is an InvalidArgument status naming the
// field.
func parse(req *rlsv3.RateLimitRequest, calls []call) error {
	switch d := req.GetDomain(); {
	case d == "":
		return invalid("domain: required")
	case len(d) > MaxDomain:
		return invalid("domain: must be at most " + strconv.Itoa(MaxDomain) + " bytes, got " + strconv.Itoa(len(d)))
	}
	ds := req.GetDescriptors()
	switch {
	case len(ds) == 0:
		return invalid("descriptors: want at least one")
	case len(ds) > MaxDescriptors:
		return invalid("descriptors: want at most " + strconv.Itoa(MaxDescriptors) + ", got " + strconv.Itoa(len(ds)))
	}
	for i, d := range ds {
		if err := parseDescriptor(d, req.GetHitsAddend(), &calls[i]); err != nil {
			return invalid("descriptors[" + strconv.Itoa(i) + "]" + err.Error())
		}
	}
	return nil
}

// descErr is a problem in one descriptor; its text starts with the field
// below the descriptor (".entries[2] (\"path\"): ...").
type descErr string

func (e descErr) Error() string { return string(e) }

func parseDescriptor(d *ratelimitv3.RateLimitDescriptor, hits uint32, c *call) error {
	*c = call{}
	// The cost: the descriptor's hits_addend when set, where 0 checks
	// without taking; else the request's, where 0 (proto3's default) is 1
	// — as envoyproxy/ratelimit reads them. Any cost decides: one past
	// every rule's capacity is OVER_LIMIT (cost_exceeds_capacity).
	cost := uint64(max(hits, 1))
	if h := d.GetHitsAddend(); h != nil {
		cost = h.GetValue()
		c.req.Peek = cost == 0
	}
	c.req.Cost = int64(min(cost, overCost))
	if d.GetIsNegativeHits() {
		return descErr(".is_negative_hits: not supported: sluice never gives back what a call took")
	}
	es := d.GetEntries()
	switch {
	case len(es) == 0:
		c.empty = true
		return nil
	case len(es) > MaxEntries:
		return descErr(".entries: want at most " + strconv.Itoa(MaxEntries) + ", got " + strconv.Itoa(len(es)))
	}
	for j, e := range es {
		key, val := e.GetKey(), e.GetValue()
		c.entries[j] = rules.Entry{Key: key, Value: val}
		if key == "" {
			return descErr(".entries[" + strconv.Itoa(j) + "].key: required")
		}
		var f field
		switch key {
		case KeyUser:
			f = fUser
		case KeyAPIKey:
			f = fAPIKey
		case KeyRemoteAddress, KeyIP:
			f = fIP
		case KeyPlan:
			// Any value decides: one that is not a plan name is a plan no
			// rule names, which the limiter decides as the caller's
			// registry or default plan (rules.Index.Plan).
			f = fPlan
		case KeyMethod:
			f = fMethod
		case KeyPath:
			f = fPath
		default:
			continue // not an entry sluice reads
		}
		// The values of the entries above are the caller's: each decides.
		// The limiter keys an odd identity by its digest and cleans the
		// path; an empty value is an absent one, and an entry given twice
		// keeps its first value.
		if p := c.field(f); *p == "" {
			*p = val
		}
	}
	c.desc.Entries = c.entries[:len(es)]
	descriptor.Attach(&c.req, &c.desc)
	return nil
}

// merge unites the calls into one when they agree: the same cost, and no
// entry with two different values. It reports false when they do not.
func merge(calls []call, dst *call) bool {
	*dst = calls[0]
	for i := 1; i < len(calls); i++ {
		c := &calls[i]
		if c.req.Cost != dst.req.Cost || c.req.Peek != dst.req.Peek || c.desc.Own != nil || dst.desc.Own != nil {
			return false
		}
		for f := range nFields {
			v, p := *c.field(f), dst.field(f)
			switch {
			case v == "":
			case *p == "":
				*p = v
			case *p != v:
				return false
			}
		}
	}
	return true
}

// OwnLimitID is the rule id a descriptor's own limit is decided and
// reported under (current_limit.name, the metrics' rule label): one id
// for every such limit, so the labels stay bounded; no rule can have it
// (a rule id has no ':').
const OwnLimitID = "envoy:descriptor-limit"

// ownWindows are the windows of Envoy's units, as sluice rules import
// imports them (MONTH 30 days, YEAR 365 days).
var ownWindows = map[typev3.RateLimitUnit]time.Duration{
	typev3.RateLimitUnit_SECOND: time.Second,
	typev3.RateLimitUnit_MINUTE: time.Minute,
	typev3.RateLimitUnit_HOUR:   time.Hour,
	typev3.RateLimitUnit_DAY:    24 * time.Hour,
	typev3.RateLimitUnit(7):     7 * 24 * time.Hour, // WEEK in the answer's enum, as envoyproxy/ratelimit reads it
	typev3.RateLimitUnit_MONTH:  30 * 24 * time.Hour,
	typev3.RateLimitUnit_YEAR:   365 * 24 * time.Hour,
}

// ownLimit returns the descriptor's own limit (RateLimitDescriptor.limit,
// Envoy's dynamic limits) as a rule, a fixed window per unit aligned to
// the epoch (what envoyproxy/ratelimit counts), and its bucket: one per
// domain, unit and entries (keys and values, in order), so that a
// descriptor keeps its count when only requests_per_unit changes, as a
// rule edit does, and starts anew when the unit does. requests_per_unit
// 0 is a limit of 0, which denies every call of the descriptor (the
// limiter's limit 0), as envoyproxy/ratelimit denies it (its count after
// the call is over 0). nil when d has no limit, or one of a unit sluice
// does not know (the configured rules then decide). A requests_per_unit
// above algorithm.MaxLimit is algorithm.MaxLimit.
func ownLimit(domain string, d *ratelimitv3.RateLimitDescriptor) (*rules.Compiled, string) {
	l := d.GetLimit()
	w, ok := ownWindows[l.GetUnit()]
	if l == nil || !ok {
		return nil, ""
	}
	limit := min(int64(l.GetRequestsPerUnit()), algorithm.MaxLimit)
	c := &rules.Compiled{Rule: rules.Rule{ID: OwnLimitID, Limit: limit, Window: rules.Duration(w),
		Algorithm: algorithm.FixedWindow, By: "entries"}, Seq: math.MaxInt}
	c.Params = c.Rule.Params()
	c.WindowSeconds = int64(w / time.Second)
	// The bucket: "desc:" and the digest of the domain, the unit and the
	// entries, each prefixed by its length.
	var b []byte
	for _, s := range [2]string{domain, strconv.Itoa(int(l.GetUnit()))} {
		b = strconv.AppendInt(b, int64(len(s)), 10)
		b = append(append(b, ':'), s...)
	}
	for _, e := range d.GetEntries() {
		for _, s := range [2]string{e.GetKey(), e.GetValue()} {
			b = strconv.AppendInt(b, int64(len(s)), 10)
			b = append(append(b, ':'), s...)
		}
	}
	return c, string(clientkey.AppendDigest([]byte("desc:"), string(b)))
}
