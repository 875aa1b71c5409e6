package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/jsonhttp"
	"github.com/sluicehq/sluice/rules"
)

// reserveAnswer is the decoded body of a reservation, read as the client
// reads it.
type reserveAnswer = client.ReserveResponse

func reserveOK(t *testing.T, s *Server, body string) reserveAnswer {
	t.Helper()
	w := postTo(t, s, "/ratelimit/reserve", body)
	if w.Code != http.StatusOK {
		t.Fatalf("POST /ratelimit/reserve %s: status %d, body %s", body, w.Code, w.Body)
	}
	var a reserveAnswer
	dec := json.NewDecoder(w.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		t.Fatalf("answer %q: %v", w.Body, err)
	}
	return a
}

func egressSet(kind algorithm.Kind) *rules.Set {
	return &rules.Set{Rules: []rules.Rule{{
		ID: "partner", Match: rules.Match{Plan: "egress"}, By: rules.ByUser, Limit: 10, Window: seconds(time.Second),
		Burst: 2, Algorithm: kind,
	}, {
		ID: "ingress", Match: rules.Match{Plan: "ingress"}, Limit: 10, Window: seconds(time.Second), Algorithm: algorithm.FixedWindow,
	}}}
}

func TestReserveSlots(t *testing.T) { forDecoders(t, testReserveSlots) }

func testReserveSlots(t *testing.T, dec string) {
	s, clk := newTestServer(t, egressSet(algorithm.TokenBucket), Config{JSONDecoder: dec})
	body := `{"user":"api.partner.example","plan":"egress","max_wait_ms":300}`
	t0 := clk.Micros()
	var waits, sendAt []int64
	for range 5 {
		a := reserveOK(t, s, body)
		if !a.Allowed || a.RetryAfterMS != 0 || a.Rule == nil || *a.Rule != "partner" || *a.Client != "user:api.partner.example" {
			t.Fatalf("answer %+v, want allowed by partner", a)
		}
		waits = append(waits, a.WaitMS)
		sendAt = append(sendAt, a.SendAtUS-t0)
	}
	if want := []int64{0, 0, 100, 200, 300}; !equal(waits, want) {
		t.Fatalf("wait_ms %v, want %v", waits, want)
	}
	if want := []int64{0, 0, 100_000, 200_000, 300_000}; !equal(sendAt, want) {
		t.Fatalf("send_at_us - now %v, want %v", sendAt, want)
	}
	for range 2 {
		a := reserveOK(t, s, body)
		if a.Allowed || a.WaitMS != 0 || a.SendAtUS != 0 || a.RetryAfterMS != 100 || a.Reason != "rate_limited" {
			t.Fatalf("beyond max_wait_ms: %+v, want denied, retry_after_ms 100, nothing taken", a)
		}
	}
	clk.Advance(100 * time.Millisecond)
	if a := reserveOK(t, s, body); !a.Allowed || a.WaitMS != 300 || a.SendAtUS != t0+400_000 {
		t.Fatalf("100ms later: %+v, want allowed, wait_ms 300, send_at_us now+300000", a)
	}
	// A slot between two milliseconds: wait_ms rounds up, send_at_us is
	// the slot to the microsecond.
	clk.Advance(1234 * time.Microsecond)
	if a := reserveOK(t, s, `{"user":"api.partner.example","plan":"egress","max_wait_ms":1000}`); !a.Allowed ||
		a.WaitMS != 399 || a.SendAtUS != t0+500_000 {
		t.Fatalf("at +101.234ms: %+v, want allowed, wait_ms 399 (398.766 rounded up), send_at_us start+500000", a)
	}
	// No max_wait_ms: only room now.
	if a := reserveOK(t, s, `{"user":"other.example","plan":"egress"}`); !a.Allowed || a.WaitMS != 0 {
		t.Fatalf("no max_wait_ms on an empty budget: %+v, want allowed at once", a)
	}
}

func TestReserveErrors(t *testing.T) { forDecoders(t, testReserveErrors) }

func testReserveErrors(t *testing.T, dec string) {
	s, _ := newTestServer(t, egressSet(algorithm.LeakyBucket), Config{JSONDecoder: dec})
	tests := []struct {
		body   string
		status int
		want   string
	}{
		{`{"user":"h","plan":"ingress","max_wait_ms":10}`, 409, `rule \"ingress\" uses fixed_window`},
		{`{"user":"h","plan":"nothing","max_wait_ms":10}`, 404, `"no_budget"`},
		{`{"user":"h","plan":"egress","max_wait_ms":-1}`, 400, "max_wait_ms: must be a whole number of milliseconds from 0 to 3600000"},
		{`{"user":"h","plan":"egress","max_wait_ms":1.5}`, 400, "max_wait_ms: must be"},
		{`{"user":"h","plan":"egress","max_wait_ms":1e3}`, 400, "max_wait_ms: must be"},
		{`{"user":"h","plan":"egress","max_wait_ms":"10"}`, 400, "max_wait_ms: must be"},
		{`{"user":"h","plan":"egress","max_wait_ms":3600001}`, 400, "max_wait_ms: must be"},
		{`{"user":"h","plan":"egress","max_wait_ms":010}`, 400, ""},
		{`{"user":"h","plan":"egress","max_wait_ms":1,"max_wait_ms":2}`, 400, `duplicate field \"max_wait_ms\"`},
		{`{"user":"h","\u0075ser":"x","plan":"egress"}`, 400, `duplicate field \"user\"`},
		{`{"user":"h","plan":"egress","bogus":1}`, 400, "bogus"},
		{`{"plan":"egress","max_wait_ms":5}`, 400, "want at least one of user, api_key, ip"},
		{`{"user":"h"} {}`, 400, "want nothing after the JSON object"},
		{`[1]`, 400, "want a JSON object"},
		{`{"user":"h","max_wait_ms":"10"}`, 400, "max_wait_ms: must be a whole number of milliseconds from 0 to 3600000, got a string"},
		{`{"user":"h","max_wait_ms":[1]}`, 400, "max_wait_ms: must be a whole number, got an array"},
		{``, 400, ""},
	}
	for _, tt := range tests {
		w := postTo(t, s, "/ratelimit/reserve", tt.body)
		if w.Code != tt.status || !strings.Contains(w.Body.String(), tt.want) {
			t.Errorf("POST %s: %d %s, want %d containing %q", tt.body, w.Code, w.Body, tt.status, tt.want)
		}
	}
	// null is absent; an escaped key is the same key.
	if a := reserveOK(t, s, `{"user":"h","plan":"egress","max_wait_ms":null}`); !a.Allowed {
		t.Errorf("max_wait_ms null: %+v", a)
	}
	if a := reserveOK(t, s, `{"user":"h","plan":"egress","max_wait\u005fms":0}`); !a.Allowed {
		t.Errorf("escaped max_wait_ms: %+v", a)
	}
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// FuzzParseReserve: any body ends in a request or an *jsonhttp.APIError, never a
// panic, and an accepted max_wait_ms is within bounds and agrees with
// ParseCheck on the rest.
func FuzzParseReserve(f *testing.F) {
	for _, s := range []string{`{"user":"a","max_wait_ms":5}`, `{"ip":"10.0.0.1","cost":2,"max_wait_ms":null}`,
		`{"max_wait_ms":3600000,"api_key":"k"}`, `{"user":"a","max_wait_ms":1,"max_wait_ms":1}`, `{`, `{"user":"\ud800"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseReserve(body)
		if err != nil {
			if _, ok := err.(*jsonhttp.APIError); !ok {
				t.Fatalf("ParseReserve(%q): error %T %v, want an *jsonhttp.APIError", body, err, err)
			}
			return
		}
		if r.MaxWaitMS < 0 || r.MaxWaitMS > MaxWaitMS || r.Cost < 1 {
			t.Fatalf("ParseReserve(%q) = %+v: out of bounds", body, r)
		}
	})
}

// FuzzParseReserveTwoPass: the tokenizer decides a reserve body as the
// former encoding/json split and ParseCheck did — the same request, or an
// error from both — on valid UTF-8 (encoding/json writes invalid bytes of
// a key as U+FFFD, which the check parser then read as a key of its own).
func FuzzParseReserveTwoPass(f *testing.F) {
	for _, s := range append(fuzzSeeds, `{"user":"a","max_wait_ms":5}`, `{"ip":"10.0.0.1","cost":2,"max_wait_ms":null}`,
		`{"max_wait_ms":3600000,"api_key":"k"}`, `{"user":"a","max_wait_ms":1,"max_wait_ms":1}`, `{"user":"a","max_wait_ms":"1"}`,
		`{"user":"a","max_wait\u005fms":7}`, `{"user":"a","max_wait_ms":-0}`, `{"user":"a","max_wait_ms":1.0}`) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !utf8.Valid(body) {
			return
		}
		got, err := ParseReserve(body)
		want, refErr := parseReserveTwoPass(body)
		if (err == nil) != (refErr == nil) {
			t.Fatalf("ParseReserve(%q) error = %v, two-pass reference error = %v", body, err, refErr)
		}
		if err == nil && got != want {
			t.Fatalf("ParseReserve(%q) = %+v, two-pass reference = %+v", body, got, want)
		}
	})
}

// FuzzReserveDecoders: the std decoder (Config.JSONDecoder) reads a
// reserve body as the tokenizer does — the same request, or the same
// error but for the words of malformed JSON — on valid UTF-8 (it decodes
// invalid bytes as U+FFFD). FuzzParseCheck holds check bodies to the same.
func FuzzReserveDecoders(f *testing.F) {
	for _, s := range append(fuzzSeeds, `{"user":"a","max_wait_ms":5}`, `{"ip":"10.0.0.1","cost":2,"max_wait_ms":null}`,
		`{"user":"a","max_wait_ms":[1]}`, `{"user":"a","max_wait_ms":1,"max_wait_ms":1}`, `{"user":"a","max_wait_ms":"1"}`) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !utf8.Valid(body) {
			return
		}
		got, err := parseReserveWith(DecoderFast, body)
		ref, refErr := parseReserveWith(DecoderStd, body)
		sameOutcome(t, "ParseReserve", body, got, err, ref, refErr)
	})
}
