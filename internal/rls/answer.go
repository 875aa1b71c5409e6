package rls

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/headers"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
)

// envoyUnits are the Envoy units a window is expressed in, longest first.
// MONTH is 30 days and YEAR 365, as Envoy reads them (the window of its
// x-ratelimit-limit header) and envoyproxy/ratelimit counts them.
var envoyUnits = [...]struct {
	d time.Duration
	u rlsv3.RateLimitResponse_RateLimit_Unit
}{
	{365 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_YEAR},
	{30 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_MONTH},
	{7 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_WEEK},
	{24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_DAY},
	{time.Hour, rlsv3.RateLimitResponse_RateLimit_HOUR},
	{time.Minute, rlsv3.RateLimitResponse_RateLimit_MINUTE},
	{time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND},
}

// CurrentLimit returns a rule's limit as Envoy's RateLimit: its name as
// the configuration names it — the rule's name; without one, nothing for
// a rule on descriptor entries (an envoyproxy/ratelimit descriptor without
// rate_limit.name, which it answers with an empty name) or a descriptor's
// own limit, and the id of any other rule — and its limit per window; nil for an unlimited
// rule, which has none. A window of whole seconds is exact: the
// longest unit (YEAR of 365 days, MONTH of 30, WEEK, DAY, HOUR, MINUTE,
// SECOND) it is a whole number of,
// with that number as unit_multiplier when it is more than 1 (100 per 10m
// is 100 per MINUTE × 10). A window of a fraction of a second (500ms,
// 1500ms) is approximated as a rate per SECOND, rounded, at least 1 (10 per
// 500ms is 20 per SECOND). Limits beyond what a uint32 holds are clamped.
func CurrentLimit(r *rules.Compiled) *rlsv3.RateLimitResponse_RateLimit {
	if r.Unlimited {
		return nil
	}
	w := time.Duration(r.Window)
	rl := &rlsv3.RateLimitResponse_RateLimit{Name: r.Name}
	if r.Name == "" && len(r.Match.Entries) == 0 && r.ID != OwnLimitID {
		rl.Name = r.ID
	}
	for _, u := range envoyUnits {
		if w >= u.d && w%u.d == 0 {
			rl.Unit = u.u
			rl.RequestsPerUnit = clampU32(r.Limit)
			if n := int64(w / u.d); n > 1 {
				rl.UnitMultiplier = wrapperspb.UInt32(clampU32(n))
			}
			return rl
		}
	}
	rl.Unit = rlsv3.RateLimitResponse_RateLimit_SECOND
	rps := math.Round(float64(r.Limit) * float64(time.Second) / float64(w))
	rl.RequestsPerUnit = clampU32(max(int64(min(rps, math.MaxUint32)), 1))
	return rl
}

// DescriptorKey names the descriptor key of r in the statistics: for a
// rule on descriptor entries, its entries as envoyproxy/ratelimit names
// them ("kind_promo.phone": each key, with _ and its value when it has
// one, joined by "."), else the rule's id.
func DescriptorKey(r *rules.Compiled) string {
	if len(r.Match.Entries) == 0 {
		return r.ID
	}
	return entriesKey(r.Match.Entries)
}

// entriesKey is the descriptor key of entries es, as envoyproxy/ratelimit
// names it in its statistics (a request's entries: with detailed_metric):
// each key, with "_" and its value when it has one, joined by ".".
func entriesKey(es []rules.Entry) string {
	var b []byte
	for i, e := range es {
		if i > 0 {
			b = append(b, '.')
		}
		b = append(b, e.Key...)
		if e.Value != "" {
			b = append(append(b, '_'), e.Value...)
		}
	}
	return string(b)
}

func clampU32(n int64) uint32 { return uint32(min(max(n, 0), math.MaxUint32)) }

// descriptorStatus returns the DescriptorStatus of d: OVER_LIMIT when it denies, the
// rule's limit (see CurrentLimit; lim caches it), what remains of it and
// the time until it is whole again. With no rule, only the code OK; with
// only an unlimited rule, OK and limit_remaining 4294967295, as
// envoyproxy/ratelimit answers an unlimited descriptor.
func descriptorStatus(d *limiter.Decision, lim *rlsv3.RateLimitResponse_RateLimit) *rlsv3.RateLimitResponse_DescriptorStatus {
	st := new(rlsv3.RateLimitResponse_DescriptorStatus)
	fillStatus(st, new(durationpb.Duration), d, lim)
	return st
}

// fillStatus sets st, a zero DescriptorStatus, as descriptorStatus
// describes it, with dur, a zero Duration, as its duration_until_reset.
func fillStatus(st *rlsv3.RateLimitResponse_DescriptorStatus, dur *durationpb.Duration, d *limiter.Decision, lim *rlsv3.RateLimitResponse_RateLimit) {
	st.Code = rlsv3.RateLimitResponse_OK
	if !d.Allowed {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if d.Rule == nil {
		if d.Unlimited {
			st.LimitRemaining = math.MaxUint32
		}
		return
	}
	if lim == nil {
		lim = CurrentLimit(d.Rule)
	}
	st.CurrentLimit = lim
	st.LimitRemaining = clampU32(d.Remaining)
	reset := max(d.ResetAfter, 0) // as durationpb.New writes it
	dur.Seconds, dur.Nanos = int64(reset/time.Second), int32(reset%time.Second)
	st.DurationUntilReset = dur
}

// answer is the memory of an answer with one status, allocated at once:
// the response, the status, its duration_until_reset and the headers.
type answer struct {
	resp    rlsv3.RateLimitResponse
	st      rlsv3.RateLimitResponse_DescriptorStatus
	dur     durationpb.Duration
	one     [1]*rlsv3.RateLimitResponse_DescriptorStatus
	headers headerBlock
}

// headerBlock holds the header values addHeaders writes, and room for
// addEnvoyHeaders' three.
type headerBlock struct {
	vals [len(headerNames)]corev3.HeaderValue
	ptrs [len(headerNames) + 3]*corev3.HeaderValue
}

// headerNames are the quota headers (docs/api.md) in the order they are sent, with
// the spelling of the spec (Envoy lower-cases them for HTTP/2 anyway).
var headerNames = [...]struct{ key, name string }{
	{headers.Limit, "X-RateLimit-Limit"},
	{headers.Remaining, "X-RateLimit-Remaining"},
	{headers.Reset, "X-RateLimit-Reset"},
	{headers.Policy, "RateLimit-Policy"},
	{headers.RateLimit, "RateLimit"},
	{"Retry-After", "Retry-After"},
	{"Content-Type", "Content-Type"},
}

var headerPool = sync.Pool{New: func() any { return make(http.Header, len(headerNames)) }}

// addHeaders puts the quota headers of d (docs/api.md, written by package
// headers, so that they are those of POST /ratelimit/check) in
// resp.ResponseHeadersToAdd: Envoy adds them to the answer, allowed or
// not. A denial also gets the 429 of docs/api.md — Retry-After, Content-Type:
// application/json and {"error":"rate_limit_exceeded","retry_after":N} as
// the raw body. Nothing when no rule matched. The header values live in
// hb, which has room for addEnvoyHeaders' after them.
func addHeaders(resp *rlsv3.RateLimitResponse, d *limiter.Decision, hb *headerBlock) {
	if d.Rule == nil {
		return
	}
	h := headerPool.Get().(http.Header)
	defer func() {
		clear(h)
		headerPool.Put(h)
	}()
	if d.Allowed {
		headers.Set(h, d)
	} else {
		w := capture{h: h}
		headers.WriteDenied(&w, d)
		resp.RawBody = w.body
	}
	vals := hb.vals[:]
	resp.ResponseHeadersToAdd = hb.ptrs[:0]
	for _, hn := range headerNames {
		if v := h[hn.key]; len(v) > 0 {
			hv := &vals[len(resp.ResponseHeadersToAdd)]
			hv.Key, hv.Value = hn.name, v[0]
			resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, hv)
		}
	}
}

// capture is the http.ResponseWriter headers.WriteDenied writes the 429 to.
type capture struct {
	h    http.Header
	body []byte
}

func (c *capture) Header() http.Header { return c.h }
func (c *capture) WriteHeader(int)     {}
func (c *capture) Write(b []byte) (int, error) {
	c.body = append(c.body, b...)
	return len(b), nil
}

// Default names of envoyproxy/ratelimit's response headers (its
// defaults of LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER,
// LIMIT_RESET_HEADER); Config names them.
const (
	EnvoyLimitHeader     = "RateLimit-Limit"
	EnvoyRemainingHeader = "RateLimit-Remaining"
	EnvoyResetHeader     = "RateLimit-Reset"
)

// addHeaders adds to resp the headers cfg asks for: sluice's quota headers
// and 429 body of d, the most restrictive decision (QuotaHeaders, see
// addHeaders), then envoyproxy/ratelimit's of statuses (EnvoyHeaders, see
// addEnvoyHeaders). Nothing by default. quotaOver, nil or one per status,
// marks the quota descriptors reported over their limit (quota.go).
func (s *Server) addHeaders(resp *rlsv3.RateLimitResponse, d *limiter.Decision, hb *headerBlock, statuses []*rlsv3.RateLimitResponse_DescriptorStatus, quotaOver []bool) {
	if s.cfg.QuotaHeaders {
		addHeaders(resp, d, hb)
	}
	if s.cfg.EnvoyHeaders {
		if st := envoyPick(statuses, quotaOver); st != nil {
			s.addEnvoyHeaders(resp, st, hb)
		}
	}
}

// envoyPick returns the status whose limit envoyproxy/ratelimit's headers
// describe: the last one OVER_LIMIT that is not a quota descriptor's
// (quotaOver), else the first with the least limit_remaining among those
// with a current_limit; nil when none has one.
func envoyPick(statuses []*rlsv3.RateLimitResponse_DescriptorStatus, quotaOver []bool) *rlsv3.RateLimitResponse_DescriptorStatus {
	var pick *rlsv3.RateLimitResponse_DescriptorStatus
	least := uint32(math.MaxUint32)
	for i, st := range statuses {
		switch {
		case st.Code == rlsv3.RateLimitResponse_OVER_LIMIT && st.CurrentLimit != nil && (quotaOver == nil || !quotaOver[i]):
			pick, least = st, 0
		case st.CurrentLimit != nil && st.LimitRemaining < least:
			pick, least = st, st.LimitRemaining
		}
	}
	return pick
}

// addEnvoyHeaders appends envoyproxy/ratelimit's response headers for st,
// under the configured names: the limit its requests_per_unit, the
// remaining its limit_remaining, the reset its duration_until_reset in
// whole seconds, rounded up.
func (s *Server) addEnvoyHeaders(resp *rlsv3.RateLimitResponse, st *rlsv3.RateLimitResponse_DescriptorStatus, hb *headerBlock) {
	reset := st.GetDurationUntilReset().AsDuration()
	secs := int64((reset + time.Second - 1) / time.Second)
	vals := &[3]corev3.HeaderValue{ // only with EnvoyHeaders: not in every answer's memory
		{Key: s.cfg.EnvoyLimitHeader, Value: strconv.FormatUint(uint64(st.CurrentLimit.RequestsPerUnit), 10)},
		{Key: s.cfg.EnvoyRemainingHeader, Value: strconv.FormatUint(uint64(st.LimitRemaining), 10)},
		{Key: s.cfg.EnvoyResetHeader, Value: strconv.FormatInt(max(secs, 0), 10)},
	}
	if resp.ResponseHeadersToAdd == nil {
		resp.ResponseHeadersToAdd = hb.ptrs[:0]
	}
	resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &vals[0], &vals[1], &vals[2])
}
