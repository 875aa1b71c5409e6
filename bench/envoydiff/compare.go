package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// resetTolerance is how far two duration_until_reset values (and two
// RateLimit-Reset headers) may be apart and still count as the same: the
// two services answer a call moments apart, and envoyproxy/ratelimit
// reports whole seconds.
const resetTolerance = time.Second

// answer is one service's answer to one call: a response or an error.
type answer struct {
	resp *rlsv3.RateLimitResponse
	err  error
}

// compare lists the fields in which a and b differ, each as
// "field: a-value | b-value"; nil when they are the same.
func compare(a, b answer) []string {
	var out []string
	add := func(field string, x, y any) { out = append(out, fmt.Sprintf("%s: %v | %v", field, x, y)) }
	if a.err != nil || b.err != nil {
		ca, cb := errCode(a.err), errCode(b.err)
		if ca != cb {
			add("grpc code", ca, cb)
		}
		return out
	}
	ra, rb := a.resp, b.resp
	if ra.OverallCode != rb.OverallCode {
		add("overall_code", ra.OverallCode, rb.OverallCode)
	}
	if len(ra.Statuses) != len(rb.Statuses) {
		add("statuses", len(ra.Statuses), len(rb.Statuses))
	}
	for i := range min(len(ra.Statuses), len(rb.Statuses)) {
		sa, sb := ra.Statuses[i], rb.Statuses[i]
		f := func(name string) string { return fmt.Sprintf("statuses[%d].%s", i, name) }
		if sa.Code != sb.Code {
			add(f("code"), sa.Code, sb.Code)
		}
		if la, lb := limitString(sa.CurrentLimit), limitString(sb.CurrentLimit); la != lb {
			add(f("current_limit"), la, lb)
		}
		if sa.LimitRemaining != sb.LimitRemaining {
			add(f("limit_remaining"), sa.LimitRemaining, sb.LimitRemaining)
		}
		if da, db := sa.DurationUntilReset, sb.DurationUntilReset; !durationsClose(da, db) {
			add(f("duration_until_reset"), durString(da), durString(db))
		}
		if sa.Quota != nil || sb.Quota != nil {
			if qa, qb := protoString(sa.Quota), protoString(sb.Quota); qa != qb {
				add(f("quota"), qa, qb)
			}
		}
	}
	if ha, hb := headersString(ra.ResponseHeadersToAdd), headersString(rb.ResponseHeadersToAdd); !headersClose(ra.ResponseHeadersToAdd, rb.ResponseHeadersToAdd) {
		add("response_headers_to_add", ha, hb)
	}
	if ha, hb := headersString(ra.RequestHeadersToAdd), headersString(rb.RequestHeadersToAdd); ha != hb {
		add("request_headers_to_add", ha, hb)
	}
	if string(ra.RawBody) != string(rb.RawBody) {
		add("raw_body", strconv.Quote(string(ra.RawBody)), strconv.Quote(string(rb.RawBody)))
	}
	if ma, mb := protoString(ra.DynamicMetadata), protoString(rb.DynamicMetadata); ma != mb {
		add("dynamic_metadata", ma, mb)
	}
	if qa, qb := protoString(ra.Quota), protoString(rb.Quota); qa != qb {
		add("quota", qa, qb)
	}
	return out
}

func errCode(err error) string {
	if err == nil {
		return "OK (an answer)"
	}
	return status.Code(err).String()
}

func limitString(l *rlsv3.RateLimitResponse_RateLimit) string {
	if l == nil {
		return "none"
	}
	s := fmt.Sprintf("{name:%q %d/%v", l.Name, l.RequestsPerUnit, l.Unit)
	if l.UnitMultiplier != nil {
		s += fmt.Sprintf("×%d", l.UnitMultiplier.Value)
	}
	return s + "}"
}

func durString(d *durationpb.Duration) string {
	if d == nil {
		return "none"
	}
	return d.AsDuration().String()
}

// durationsClose: both absent, or both present within resetTolerance. An
// absent duration and one of zero are the same to Envoy, which reads only
// a duration above zero.
func durationsClose(a, b *durationpb.Duration) bool {
	da, db := a.AsDuration(), b.AsDuration() // nil reads as 0
	diff := da - db
	if diff < 0 {
		diff = -diff
	}
	return diff <= resetTolerance
}

func headersString(hs []*corev3.HeaderValue) string {
	var s []string
	for _, h := range hs {
		s = append(s, h.Key+"="+h.Value)
	}
	return "[" + strings.Join(s, " ") + "]"
}

// headersClose: the same names in the same order and the same values,
// except numbers of a *-Reset header, which may be resetTolerance apart.
func headersClose(a, b []*corev3.HeaderValue) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !strings.EqualFold(a[i].Key, b[i].Key) {
			return false
		}
		if a[i].Value == b[i].Value {
			continue
		}
		if !strings.HasSuffix(strings.ToLower(a[i].Key), "reset") {
			return false
		}
		x, err1 := strconv.ParseFloat(a[i].Value, 64)
		y, err2 := strconv.ParseFloat(b[i].Value, 64)
		if err1 != nil || err2 != nil || math.Abs(x-y) > resetTolerance.Seconds() {
			return false
		}
	}
	return true
}

// protoString is m in protobuf's JSON form, "" for an absent message.
func protoString(m proto.Message) string {
	if m == nil || !m.ProtoReflect().IsValid() {
		return ""
	}
	b, err := protojson.Marshal(m)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// answerString is an answer as one line, for the report.
func answerString(a answer) string {
	if a.err != nil {
		return "error " + errCode(a.err)
	}
	r := a.resp
	var parts []string
	for _, s := range r.Statuses {
		parts = append(parts, fmt.Sprintf("%v %s rem=%d reset=%s", s.Code, limitString(s.CurrentLimit), s.LimitRemaining, durString(s.DurationUntilReset)))
	}
	out := fmt.Sprintf("%v [%s]", r.OverallCode, strings.Join(parts, "; "))
	if len(r.ResponseHeadersToAdd) > 0 {
		out += " headers " + headersString(r.ResponseHeadersToAdd)
	}
	return out
}
