package server

import (
	"bytes"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/identity"
	"github.com/sluicehq/sluice/internal/flatjson"
	"github.com/sluicehq/sluice/internal/jsonhttp"
	"github.com/sluicehq/sluice/internal/quote"
	"github.com/sluicehq/sluice/limiter"
)

// MaxWaitMS is the largest max_wait_ms of a reservation: one hour, as
// limiter.MaxWait.
const MaxWaitMS = 3_600_000

// Codes of the reserve API's errors.
const (
	CodeNoBudget           = "no_budget"           // 404: no rule matches the reservation
	CodeReserveUnsupported = "reserve_unsupported" // 409: a matching rule's algorithm cannot reserve; 501: the store cannot
)

// ReserveRequest is the body of POST /ratelimit/reserve: a check request
// and max_wait_ms, the longest the caller will wait for its slot:
//
//	{"user":"api.partner.example","plan":"egress","cost":1,"max_wait_ms":2000}
type ReserveRequest struct {
	CheckRequest
	MaxWaitMS int64 // 0..MaxWaitMS; 0 when absent or null
}

// ParseReserve parses and validates a reserve request body: the fields and
// rules of ParseCheck, plus max_wait_ms, a whole number of milliseconds from
// 0 to 3600000 written without sign, fraction or exponent (0 when absent or
// null). The error is an *jsonhttp.APIError (400, "invalid_request") whose
// message names the field. The returned strings do not alias body.
func ParseReserve(body []byte) (ReserveRequest, error) {
	var req ReserveRequest
	var esc []byte
	err := parseReserve(bytes.Clone(body), &esc, &req)
	return req, err
}

// parseReserve is parseCheck for a reserve body: the same tokenizer, which
// takes max_wait_ms too.
func parseReserve(b []byte, esc *[]byte, dst *ReserveRequest) error {
	return parseBody(false, b, esc, &dst.CheckRequest, &dst.MaxWaitMS)
}

// maxWait is the max_wait_ms the tokenizer read into r: 0 when absent or
// null.
func maxWait(r *flatjson.Fields) (int64, error) {
	const want = "max_wait_ms: must be a whole number of milliseconds from 0 to 3600000"
	switch r.Kind[fMaxWait] {
	case flatjson.Absent, flatjson.Null:
		return 0, nil
	case flatjson.Number:
	default:
		return 0, invalid(want + ", got " + r.Kind[fMaxWait].String())
	}
	s := r.Text[fMaxWait]
	if len(s) == 0 || len(s) > 7 || (len(s) > 1 && s[0] == '0') {
		return 0, invalid(want + ", got " + quote.Short(s))
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, invalid(want + ", got " + quote.Short(s))
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > MaxWaitMS {
		return 0, invalid(want + ", got " + quote.Short(s))
	}
	return n, nil
}

// reserve is POST /ratelimit/reserve: a slot of the matching rules' budget
// within max_wait_ms, or a denial that takes nothing.
func (s *Server) reserve(w http.ResponseWriter, r *http.Request) error {
	buf := bufPool.Get().(*buffers)
	defer buf.release()
	if err := s.readBody(w, r, buf); err != nil {
		return err
	}
	var req ReserveRequest
	if err := parseBody(s.stdJSON, buf.body, &buf.esc, &req.CheckRequest, &req.MaxWaitMS); err != nil {
		return err
	}
	lr := req.limiterRequest()
	d, wait, err := s.l.Reserve(r.Context(), &lr, msDuration(req.MaxWaitMS))
	switch {
	case errors.Is(err, limiter.ErrNoBudget):
		return &jsonhttp.APIError{Status: http.StatusNotFound, Code: CodeNoBudget,
			Message: "no rule matches this reservation, so there is no budget to reserve from; add a token_bucket or leaky_bucket rule that matches its plan and endpoint"}
	case errors.Is(err, limiter.ErrReserveKind):
		return &jsonhttp.APIError{Status: http.StatusConflict, Code: CodeReserveUnsupported, Message: err.Error()}
	case errors.Is(err, limiter.ErrReserveUnsupported):
		return &jsonhttp.APIError{Status: http.StatusNotImplemented, Code: CodeReserveUnsupported, Message: err.Error()}
	case err != nil:
		return s.unavailable(r.Context(), err)
	}
	s.decided(w, &d)
	// The check's answer with "wait_ms" and "send_at_us" first.
	out := append(buf.out[:0], `{"wait_ms":`...)
	var waitMS, sendAt int64
	if d.Allowed {
		waitMS = ceilMillis(wait)
		// The slot on the store's clock, to the microsecond: a client
		// that sleeps until it, not for wait_ms from when the answer
		// arrives, keeps the slots' spacing whatever the answer's delay.
		sendAt = d.Now.Add(wait).UnixMicro()
	}
	out = strconv.AppendInt(out, waitMS, 10)
	out = append(out, `,"send_at_us":`...)
	out = strconv.AppendInt(out, sendAt, 10)
	out = append(out, ',')
	var id [identity.MaxID]byte
	var client []byte
	if d.Rule != nil {
		client = s.l.AppendClientID(id[:0], d.KeyedBy, &lr) // the id the limiter keyed the bucket by
	}
	out = appendAnswer(out, &d, client)
	// appendAnswer began its own object: drop its '{'.
	i := bytes.IndexByte(out[len(`{"wait_ms":`):], '{') + len(`{"wait_ms":`)
	out = append(out[:i], out[i+1:]...)
	buf.out = out
	w.Write(out) //nolint:errcheck // the client is gone; nothing to do
	return nil
}

func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
