package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/jsonhttp"
)

// forDecoders runs test on each Config.JSONDecoder.
func forDecoders(t *testing.T, test func(t *testing.T, dec string)) {
	for _, dec := range []string{DecoderFast, DecoderStd} {
		t.Run(dec, func(t *testing.T) { test(t, dec) })
	}
}

// sameMessage reports whether got, an error message of the decoder dec, is
// want, the hand-written tokenizer's: the std decoder words malformed JSON
// as encoding/json does.
func sameMessage(dec, got, want string) bool {
	if dec == DecoderStd && strings.HasPrefix(want, "malformed JSON") {
		return strings.HasPrefix(got, "malformed JSON")
	}
	return got == want
}

// parseCheckWith is ParseCheck with the decoder dec.
func parseCheckWith(dec string, body []byte) (CheckRequest, error) {
	var req CheckRequest
	var esc []byte
	err := parseBody(dec == DecoderStd, bytes.Clone(body), &esc, &req, nil)
	return req, err
}

// parseReserveWith is ParseReserve with the decoder dec.
func parseReserveWith(dec string, body []byte) (ReserveRequest, error) {
	var req ReserveRequest
	var esc []byte
	err := parseBody(dec == DecoderStd, bytes.Clone(body), &esc, &req.CheckRequest, &req.MaxWaitMS)
	return req, err
}

func TestParseCheck(t *testing.T) { forDecoders(t, testParseCheck) }

func testParseCheck(t *testing.T, dec string) {
	tests := []struct {
		name string
		body string
		want CheckRequest
	}{
		{"full", `{"user":"alice","api_key":"k_live_42","ip":"203.0.113.7","plan":"free","endpoint":"GET /api/orders","cost":3}`,
			CheckRequest{User: "alice", APIKey: "k_live_42", IP: "203.0.113.7", Plan: "free", Endpoint: "GET /api/orders", Cost: 3, Method: "GET", Path: "/api/orders"}},
		{"user only, cost defaults to 1", `{"user":"alice"}`, CheckRequest{User: "alice", Cost: 1}},
		{"api key only", `{"api_key":"k"}`, CheckRequest{APIKey: "k", Cost: 1}},
		{"ip only", `{"ip":"2001:db8::1"}`, CheckRequest{IP: "2001:db8::1", Cost: 1}},
		{"bracketed ipv6", `{"ip":"[2001:db8::1]"}`, CheckRequest{IP: "[2001:db8::1]", Cost: 1}},
		{"ipv6 zone", `{"ip":"fe80::1%eth0"}`, CheckRequest{IP: "fe80::1%eth0", Cost: 1}},
		{"whitespace everywhere", " \t\r\n{ \"user\" :\n\"a\" , \"cost\" : 7 }\n ", CheckRequest{User: "a", Cost: 7}},
		{"keys in any order", `{"cost":2,"endpoint":"POST /login","ip":"10.0.0.1"}`,
			CheckRequest{IP: "10.0.0.1", Endpoint: "POST /login", Cost: 2, Method: "POST", Path: "/login"}},
		{"nulls are absent", `{"user":"a","api_key":null,"ip":null,"plan":null,"endpoint":null,"cost":null}`, CheckRequest{User: "a", Cost: 1}},
		{"empty strings are absent", `{"user":"a","api_key":"","ip":"","plan":"","endpoint":""}`, CheckRequest{User: "a", Cost: 1}},
		{"escapes", `{"user":"a\"b\\c\/d\u00e9\ud83d\ude00"}`, CheckRequest{User: "a\"b\\c/dé😀", Cost: 1}},
		{"escaped key", `{"\u0075ser":"a"}`, CheckRequest{User: "a", Cost: 1}},
		{"lone surrogate becomes U+FFFD", `{"user":"\ud800x"}`, CheckRequest{User: "\ufffdx", Cost: 1}},
		{"utf-8 user", `{"user":"zoë 東京"}`, CheckRequest{User: "zoë 東京", Cost: 1}},
		{"query stripped from path", `{"user":"a","endpoint":"GET /api/orders?page=2#x"}`,
			CheckRequest{User: "a", Endpoint: "GET /api/orders?page=2#x", Cost: 1, Method: "GET", Path: "/api/orders?page=2#x"}},
		// What a caller of the integrating service controls is decided,
		// never refused: the limiter keys odd identities by their digest
		// and cleans the path.
		{"257-byte user", `{"user":"` + strings.Repeat("u", 257) + `"}`, CheckRequest{User: strings.Repeat("u", 257), Cost: 1}},
		{"user with control characters", `{"user":"a\n\u007f\u0085b"}`, CheckRequest{User: "a\n\x7f\u0085b", Cost: 1}},
		{"user not UTF-8", "{\"user\":\"a\xffb\"}", CheckRequest{User: "a\xffb", Cost: 1}},
		{"api key of 300 bytes", `{"api_key":"` + strings.Repeat("k", 300) + `"}`, CheckRequest{APIKey: strings.Repeat("k", 300), Cost: 1}},
		{"ip not an address", `{"ip":"203.0.113"}`, CheckRequest{IP: "203.0.113", Cost: 1}},
		{"ip with port", `{"ip":"203.0.113.7:80"}`, CheckRequest{IP: "203.0.113.7:80", Cost: 1}},
		{"long query", `{"user":"a","endpoint":"GET /api/orders?q=` + strings.Repeat("x", 4100) + `"}`,
			CheckRequest{User: "a", Endpoint: "GET /api/orders?q=" + strings.Repeat("x", 4100), Cost: 1, Method: "GET", Path: "/api/orders?q=" + strings.Repeat("x", 4100)}},
		{"lowercase method", `{"user":"a","endpoint":"get /api"}`, CheckRequest{User: "a", Endpoint: "get /api", Cost: 1, Method: "get", Path: "/api"}},
		{"path with space and DEL", `{"user":"a","endpoint":"GET /a b\u007f"}`, CheckRequest{User: "a", Endpoint: "GET /a b\x7f", Cost: 1, Method: "GET", Path: "/a b\x7f"}},
		{"relative path", `{"user":"a","endpoint":"GET api"}`, CheckRequest{User: "a", Endpoint: "GET api", Cost: 1, Method: "GET", Path: "api"}},
		{"max cost", `{"user":"a","cost":1000000000}`, CheckRequest{User: "a", Cost: 1000000000}},
		{"plan chars", `{"user":"a","plan":"Pro_2.x-y"}`, CheckRequest{User: "a", Plan: "Pro_2.x-y", Cost: 1}},
		{"256-byte user", `{"user":"` + strings.Repeat("u", 256) + `"}`, CheckRequest{User: strings.Repeat("u", 256), Cost: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseCheckWith(dec, []byte(tt.body))
			if err != nil {
				t.Fatalf("ParseCheck(%s) error: %v", tt.body, err)
			}
			if dec == DecoderStd { // encoding/json decodes bytes that are not UTF-8 as U+FFFD
				tt.want.User = strings.ToValidUTF8(tt.want.User, "\ufffd")
			}
			if got != tt.want {
				t.Errorf("ParseCheck(%s) = %+v, want %+v", tt.body, got, tt.want)
			}
		})
	}
}

func TestParseCheckErrors(t *testing.T) { forDecoders(t, testParseCheckErrors) }

func testParseCheckErrors(t *testing.T, dec string) {
	tests := []struct {
		name string
		body string
		want string // substring of the message
	}{
		{"empty body", ``, "request body is empty"},
		{"only whitespace", "  \n", "request body is empty"},
		{"not an object", `[]`, "malformed JSON at offset 0: want a JSON object"},
		{"string", `"user"`, "want a JSON object"},
		{"unknown field", `{"user":"a","usr":"b"}`, `unknown field "usr"`},
		{"unknown field, case differs", `{"User":"a"}`, `unknown field "User"`},
		{"duplicate", `{"user":"a","user":"b"}`, `duplicate field "user"`},
		{"duplicate after null", `{"cost":null,"cost":2,"user":"a"}`, `duplicate field "cost"`},
		{"no identity", `{"plan":"free"}`, "want at least one of user, api_key, ip"},
		{"empty object", `{}`, "want at least one of user, api_key, ip"},
		{"identities empty", `{"user":"","ip":null}`, "want at least one of user, api_key, ip"},
		{"ip number", `{"ip":3}`, "ip: must be a string, got a number"},
		{"endpoint without method", `{"user":"a","endpoint":"/api/orders"}`, "endpoint: want \"METHOD /path\""},
		{"endpoint empty method", `{"user":"a","endpoint":" /api"}`, `endpoint: want "METHOD /path", e.g. "GET /api/orders", got " /api"`},
		{"endpoint type", `{"user":"a","endpoint":["GET /"]}`, "endpoint: must be a string, got an array"},
		{"cost zero", `{"user":"a","cost":0}`, "cost: must be at least 1, got 0"},
		{"cost negative", `{"user":"a","cost":-3}`, "cost: must be at least 1, got -3"},
		{"cost fraction", `{"user":"a","cost":1.5}`, "cost: must be a whole number written without fraction or exponent, got 1.5"},
		{"cost 1.0", `{"user":"a","cost":1.0}`, "cost: must be a whole number"},
		{"cost exponent", `{"user":"a","cost":1e3}`, "cost: must be a whole number written without fraction or exponent, got 1e3"},
		{"cost string", `{"user":"a","cost":"2"}`, "cost: must be a whole number, got a string"},
		{"cost bool", `{"user":"a","cost":true}`, "cost: must be a whole number, got a boolean"},
		{"cost object", `{"user":"a","cost":{}}`, "cost: must be a whole number, got an object"},
		{"cost too big", `{"user":"a","cost":1000000001}`, "cost: must be at most 1000000000, got 1000000001"},
		{"cost huge", `{"user":"a","cost":123456789012345678901234567890}`, "cost: must be at most 1000000000"},
		{"cost leading zero", `{"user":"a","cost":01}`, "malformed JSON at offset 20: want ',' or '}' after the value of \"cost\", got '1'"},
		{"plan chars", `{"user":"a","plan":"free plan"}`, `plan: must be 1 to 64 of A-Z a-z 0-9 . _ - starting with a letter or digit, got "free plan"`},
		{"plan leading dot", `{"user":"a","plan":".x"}`, "plan: must be 1 to 64"},
		{"plan too long", `{"user":"a","plan":"` + strings.Repeat("p", 65) + `"}`, "plan: must be 1 to 64"},
		{"plan number", `{"user":"a","plan":1}`, "plan: must be a string, got a number"},
		{"user object", `{"user":{"id":1}}`, "user: must be a string, got an object"},
		{"user bool", `{"user":false}`, "user: must be a string, got a boolean"},
		{"trailing data", `{"user":"a"}x`, "malformed JSON at offset 12: want nothing after the JSON object, got 'x'"},
		{"two objects", `{"user":"a"}{}`, "want nothing after the JSON object"},
		{"trailing comma", `{"user":"a",}`, "malformed JSON at offset 12: want a string key, got '}'"},
		{"missing colon", `{"user" "a"}`, `malformed JSON at offset 8: want ':' after key "user", got '"'`},
		{"missing comma", `{"user":"a" "ip":"1.2.3.4"}`, `want ',' or '}' after the value of "user"`},
		{"unterminated object", `{"user":"a"`, "malformed JSON: unexpected end of input at offset 11"},
		{"unterminated string", `{"user":"a`, "malformed JSON: unexpected end of input at offset 10"},
		{"raw control in string", "{\"user\":\"a\tb\"}", "malformed JSON at offset 10: control characters must be escaped"},
		{"bad escape", `{"user":"a\qb"}`, "invalid escape in a string"},
		{"bad unicode escape", `{"user":"\u12g4"}`, `want four hex digits after \u`},
		{"short unicode escape", `{"user":"\u12"}`, `want four hex digits after \u`},
		{"single quotes", `{'user':'a'}`, "want a string key, got '''"},
		{"bad literal", `{"user":nul}`, "malformed JSON at offset 11: want null, got '}'"},
		{"bare word", `{"user":alice}`, "want a value, got 'a'"},
		{"minus alone", `{"cost":-}`, "want a digit in a number"},
		{"fraction without digits", `{"cost":1.}`, "want a digit after the decimal point"},
		{"exponent without digits", `{"cost":1e}`, "want a digit in the exponent"},
		{"nested unknown value", `{"meta":{"a":1},"user":"a"}`, `unknown field "meta"`},
		{"non-ascii junk", "{\"user\":\"a\"}\x00", "got byte 0x0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseCheckWith(dec, []byte(tt.body))
			if err == nil {
				t.Fatalf("ParseCheck(%s) = %+v, want error containing %q", tt.body, got, tt.want)
			}
			ae, ok := errors.AsType[*jsonhttp.APIError](err)
			if !ok || ae.Status != 400 || ae.Code != CodeInvalidRequest {
				t.Fatalf("ParseCheck(%s) error = %#v, want a 400 invalid_request *jsonhttp.APIError", tt.body, err)
			}
			if dec == DecoderStd {
				// The same message as the tokenizer's, but for the words
				// of malformed JSON.
				_, fast := ParseCheck([]byte(tt.body))
				if !sameMessage(dec, ae.Message, fast.(*jsonhttp.APIError).Message) {
					t.Errorf("ParseCheck(%s) message = %q, the tokenizer's %q", tt.body, ae.Message, fast)
				}
			} else if !strings.Contains(ae.Message, tt.want) {
				t.Errorf("ParseCheck(%s) message = %q, want it to contain %q", tt.body, ae.Message, tt.want)
			}
		})
	}
}

func TestParseCheckDoesNotAlias(t *testing.T) {
	body := []byte(`{"user":"alice","ip":"10.0.0.1","endpoint":"GET /x"}`)
	req, err := ParseCheck(body)
	if err != nil {
		t.Fatal(err)
	}
	for i := range body {
		body[i] = 'z'
	}
	if req.User != "alice" || req.IP != "10.0.0.1" || req.Path != "/x" {
		t.Errorf("after the body was overwritten, ParseCheck's result = %+v, want alice, 10.0.0.1, /x", req)
	}
}

var fuzzSeeds = []string{
	`{"user":"alice","api_key":"k_live_42","ip":"203.0.113.7","plan":"free","endpoint":"GET /api/orders","cost":1}`,
	`{"user":"alice"}`,
	`{"ip":"2001:db8::1","endpoint":"POST /login?x=1"}`,
	`{"ip":"[::ffff:10.0.0.1]","cost":1000000000}`,
	`{"api_key":"k\u00e9\ud83d\ude00\n","cost":1e3}`,
	`{"user":"\ud800","cost":1.5}`,
	`{"user":"a","user":"b"}`,
	`{"user":"a","extra":1}`,
	`{"user":null,"ip":"1.2.3.4","plan":"Pro-1","cost":-0}`,
	` { "user" : "a" } `,
	`{"user":"a"}x`,
	`{"user":"a",}`,
	`{"user":[1,{"a":2}]}`,
	`{"user":true,"cost":false}`,
	`{"endpoint":"GET /é","user":"\"\\\/\b\f\r\t"}`,
	`{"cost":"2","user":"x"}`,
	"{\"user\":\"a\xffb\"}",
	``,
	`{`,
	`{"`,
	`{"user":"a`,
	`{"cost":01,"user":"a"}`,
	`{"cost":1E+2,"user":"a"}`,
}

func FuzzParseCheck(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := ParseCheck(body)
		if err != nil {
			ae, ok := errors.AsType[*jsonhttp.APIError](err)
			if !ok || ae.Status != 400 || ae.Code != CodeInvalidRequest || ae.Message == "" {
				t.Fatalf("ParseCheck(%q) error = %#v, want a 400 invalid_request *jsonhttp.APIError", body, err)
			}
		} else {
			if !json.Valid(body) {
				t.Fatalf("ParseCheck(%q) accepted invalid JSON: %+v", body, req)
			}
			// Accepted input re-encodes to JSON that parses to the same
			// value (encoding/json writes bytes that are not UTF-8 as
			// U+FFFD, which ParseCheck keeps as they are).
			if !utf8.Valid(body) {
				return
			}
			enc, err := json.Marshal(req)
			if err != nil {
				t.Fatalf("json.Marshal(%+v): %v", req, err)
			}
			again, err := ParseCheck(enc)
			if err != nil || again != req {
				t.Fatalf("ParseCheck(%s) (re-encoded from %q) = %+v, %v; want %+v", enc, body, again, err, req)
			}
		}
		// The std decoder (encoding/json, held to the same strictness)
		// agrees: the same request, or the same error but for the words of
		// malformed JSON. On valid UTF-8: it decodes invalid bytes as U+FFFD.
		if !utf8.Valid(body) {
			return
		}
		ref, refErr := parseCheckWith(DecoderStd, body)
		sameOutcome(t, "ParseCheck", body, req, err, ref, refErr)
	})
}

// sameOutcome fails t unless the two decoders' outcomes on body — the fast
// one's got, err and the std one's ref, refErr — are the same request or
// the same API error (sameMessage).
func sameOutcome[R comparable](t *testing.T, what string, body []byte, got R, err error, ref R, refErr error) {
	t.Helper()
	if (err == nil) != (refErr == nil) {
		t.Fatalf("%s(%q) error = %v, std decoder's error = %v", what, body, err, refErr)
	}
	if err == nil {
		if got != ref {
			t.Fatalf("%s(%q) = %+v, std decoder's = %+v", what, body, got, ref)
		}
		return
	}
	ae, ok := errors.AsType[*jsonhttp.APIError](err)
	re, refOK := errors.AsType[*jsonhttp.APIError](refErr)
	if !ok || !refOK || ae.Status != re.Status || ae.Code != re.Code || !sameMessage(DecoderStd, re.Message, ae.Message) {
		t.Fatalf("%s(%q) error = %#v, std decoder's error = %#v", what, body, err, refErr)
	}
}
