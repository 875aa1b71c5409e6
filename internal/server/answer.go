package server

import (
	"strconv"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/internal/jsonhttp"
	"github.com/sluicehq/sluice/limiter"
)

// appendAnswer appends the JSON answer to a check:
//
//	{"allowed":false,"limit":100,"remaining":0,"reset_after_ms":2400,
//	 "retry_after_ms":600,"rule":"free-per-user","client":"user:alice",
//	 "reason":"rate_limited","shadow_denied":"beta-cap"}
//
// plus "degraded":true,"source":"local_fallback"|"unavailable" when the
// shared store could not be asked.
//
// Times are rounded up to the millisecond, never earlier than the real
// moment; reason only when denied, shadow_denied only when set; rule and
// client are null when no rule matched. client is the id of the bucket the
// rule keyed the call by (limiter.AppendClientID).
func appendAnswer(b []byte, d *limiter.Decision, client []byte) []byte {
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, d.Allowed)
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, d.Limit, 10)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, max(d.Remaining, 0), 10)
	b = append(b, `,"reset_after_ms":`...)
	b = strconv.AppendInt(b, ceilMillis(d.ResetAfter), 10)
	b = append(b, `,"retry_after_ms":`...)
	var retry int64
	if !d.Allowed {
		retry = ceilMillis(d.RetryAfter)
	}
	b = strconv.AppendInt(b, retry, 10)
	if d.Rule == nil {
		b = append(b, `,"rule":null,"client":null`...)
	} else {
		b = append(b, `,"rule":`...)
		b = jsonhttp.AppendString(b, d.Rule.ID)
		b = append(b, `,"client":`...)
		if len(client) > 0 {
			b = jsonhttp.AppendString(b, unsafe.String(unsafe.SliceData(client), len(client)))
		} else {
			b = append(b, "null"...)
		}
	}
	if !d.Allowed {
		b = append(b, `,"reason":`...)
		b = jsonhttp.AppendString(b, d.Reason.String())
	}
	if d.ShadowDenied != "" {
		b = append(b, `,"shadow_denied":`...)
		b = jsonhttp.AppendString(b, d.ShadowDenied)
	}
	if d.Origin.Degraded() {
		// The shared store was not asked: a coarse local limit decided
		// (local_fallback), or a fail-closed rule denied (unavailable).
		b = append(b, `,"degraded":true,"source":`...)
		b = jsonhttp.AppendString(b, d.Origin.String())
	}
	return append(b, "}\n"...)
}

// ceilMillis returns d in milliseconds, rounded up; 0 for d ≤ 0.
func ceilMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
