package server

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"

	"github.com/sluicehq/sluice/internal/jsonhttp"
	"github.com/sluicehq/sluice/internal/quote"
)

// parseReserveTwoPass is how reserve bodies were parsed before the
// tokenizer took max_wait_ms: encoding/json splits it off and re-encodes
// the rest for ParseCheck. It is the reference FuzzParseReserve holds
// ParseReserve to, and the baseline of BenchmarkParseReserve.
//
// It parses and validates a reserve request body: the fields and
// rules of ParseCheck, plus max_wait_ms, a whole number of milliseconds from
// 0 to 3600000 written without sign, fraction or exponent (0 when absent or
// null). The error is an *jsonhttp.APIError (400, "invalid_request") whose message
// names the field.
func parseReserveTwoPass(body []byte) (ReserveRequest, error) {
	var out ReserveRequest
	rest, wait, err := refSplitMaxWait(body)
	if err != nil {
		return out, err
	}
	out.MaxWaitMS = wait
	out.CheckRequest, err = ParseCheck(rest)
	return out, err
}

// splitMaxWait takes max_wait_ms out of the object in body and returns the
// object without it (for ParseCheck, which judges the rest as strictly as a
// check), and its value. A key repeated at the top level is refused, as
// ParseCheck does.
func refSplitMaxWait(body []byte) ([]byte, int64, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	if d, ok := tok.(json.Delim); err != nil || !ok || d != '{' {
		return nil, 0, invalid("the body must be one JSON object")
	}
	out := append(make([]byte, 0, len(body)), '{')
	seen := make(map[string]bool, 8)
	var wait int64
	for dec.More() {
		tok, err := dec.Token()
		key, ok := tok.(string)
		if err != nil || !ok {
			return nil, 0, invalid("the body must be one JSON object")
		}
		if seen[key] {
			return nil, 0, invalid(quote.Short(key) + ": repeated")
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, 0, invalid("the body must be one JSON object: " + err.Error())
		}
		if key == "max_wait_ms" {
			if wait, err = refParseMaxWait(raw); err != nil {
				return nil, 0, err
			}
			continue
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = jsonhttp.AppendString(out, key)
		out = append(out, ':')
		out = append(out, raw...)
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, 0, invalid("the body must be one JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, 0, invalid("the body must be one JSON object with nothing after it")
	}
	return append(out, '}'), wait, nil
}

func refParseMaxWait(raw json.RawMessage) (int64, error) {
	const want = "max_wait_ms: must be a whole number of milliseconds from 0 to 3600000"
	s := string(raw)
	if s == "null" {
		return 0, nil
	}
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
