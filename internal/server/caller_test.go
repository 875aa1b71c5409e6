package server

import (
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/identity"
	"github.com/sluicehq/sluice/rules"
)

// rawJSONString writes s as a JSON string, escaping only what JSON must
// escape: bytes that are not UTF-8 are sent as they are, as a careless
// client would.
func rawJSONString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// TestCheckCallerValuesDecide: the values the issue lists, sent to the
// decision API, are decided — allowed, then denied once their bucket is
// used — and never answered 400, which a client would have to let through.
func TestCheckCallerValuesDecide(t *testing.T) { forDecoders(t, testCheckCallerValuesDecide) }

func testCheckCallerValuesDecide(t *testing.T, dec string) {
	tests := []struct{ name, fields string }{
		{"long query", `"user":"alice","endpoint":"GET /api/orders?q=` + strings.Repeat("x", 4100) + `"`},
		{"user of 257 bytes", `"user":"` + strings.Repeat("u", 257) + `","endpoint":"GET /api/orders"`},
		{"api_key of 257 bytes", `"api_key":"` + strings.Repeat("k", 257) + `","endpoint":"GET /api/orders"`},
		{"user with 0x7f", `"user":"al\u007fice","endpoint":"GET /api/orders"`},
		{"api_key with 0x7f", `"api_key":"k\u007f","endpoint":"GET /api/orders"`},
		{"path with 0x7f", `"user":"p7f","endpoint":"GET /api/orders\u007f"`},
		{"user not UTF-8", `"user":` + rawJSONString("al\xffice") + `,"endpoint":"GET /api/orders"`},
		{"api_key not UTF-8", `"api_key":` + rawJSONString("k\xc3(") + `,"endpoint":"GET /api/orders"`},
		{"path not UTF-8", `"user":"bob","endpoint":` + rawJSONString("GET /api/orders/\xff")},
		{"ip not an address", `"ip":"not-an-ip","endpoint":"GET /api/orders"`},
		{"method in lower case", `"user":"carol","endpoint":"get /api/orders"`},
	}
	// The API keys are registered: an unknown one is no caller (see
	// TestCheckUnregisteredAPIKeyIsNoCaller). The std decoder reads the
	// key not UTF-8 as encoding/json does, its bad byte as U+FFFD.
	clients := map[string]rules.Client{}
	for _, k := range []string{strings.Repeat("k", 257), "k\x7f", "k\xc3(", "k\ufffd("} {
		clients[string(identity.AppendAPIKey(nil, k))] = rules.Client{Plan: "free"}
	}
	s, _ := newTestServer(t, &rules.Set{Rules: []rules.Rule{
		{ID: "all", Match: rules.Match{Endpoint: "* /api/*"}, Limit: 1, Window: seconds(time.Minute)},
	}, Clients: clients}, Config{JSONDecoder: dec})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := "{" + tt.fields + "}"
			for i, want := range []string{`"allowed":true`, `"allowed":false`, `"allowed":false`} {
				w := post(t, s, body)
				if w.Code != http.StatusOK || !strings.HasPrefix(w.Body.String(), "{"+want) || !strings.Contains(w.Body.String(), `"rule":"all"`) {
					t.Fatalf("call %d: %d %.200s, want 200 {%s under rule all", i+1, w.Code, w.Body, want)
				}
				if !utf8.Valid(w.Body.Bytes()) {
					t.Fatalf("call %d: the answer %q is not UTF-8", i+1, w.Body)
				}
			}
		})
	}
}

// TestCheckPathsFoldAndHead: through the decision API, every spelling of
// /api/orders is the GET /api/orders endpoint, and HEAD is GET.
func TestCheckPathsFoldAndHead(t *testing.T) { forDecoders(t, testCheckPathsFoldAndHead) }

func testCheckPathsFoldAndHead(t *testing.T, dec string) {
	s, _ := newTestServer(t, &rules.Set{Rules: []rules.Rule{
		{ID: "orders", Match: rules.Match{Endpoint: "GET /api/orders"}, By: rules.ByIP, Limit: 1, Window: seconds(time.Minute)},
	}}, Config{JSONDecoder: dec})
	check := func(endpoint string) string {
		return post(t, s, `{"ip":"203.0.113.7","endpoint":`+rawJSONString(endpoint)+`}`).Body.String()
	}
	if got := check("GET /api/orders"); !strings.HasPrefix(got, `{"allowed":true`) {
		t.Fatalf("GET /api/orders = %s, want allowed", got)
	}
	for _, e := range []string{"GET //api/orders", "GET /api/orders/", "GET /api//orders", "GET /api/./orders",
		"GET /api/x/../orders", "GET /api/%6frders", "GET /api%2Forders", "GET /api/orders;jsessionid=1", "HEAD /api/orders", "head /api/orders"} {
		if got := check(e); !strings.HasPrefix(got, `{"allowed":false`) || !strings.Contains(got, `"rule":"orders"`) {
			t.Errorf("%s = %s, want denied under orders", e, got)
		}
	}
}

// TestCheckIPv6OneBucket: "[2001:db8::1]" and "2001:db8::1" are one
// caller, named alike in the answer.
func TestCheckIPv6OneBucket(t *testing.T) { forDecoders(t, testCheckIPv6OneBucket) }

func testCheckIPv6OneBucket(t *testing.T, dec string) {
	s, _ := newTestServer(t, &rules.Set{Rules: []rules.Rule{
		{ID: "ip", By: rules.ByIP, Limit: 1, Window: seconds(time.Minute)},
	}}, Config{JSONDecoder: dec})
	if got := post(t, s, `{"ip":"2001:db8::1"}`).Body.String(); !strings.HasPrefix(got, `{"allowed":true`) || !strings.Contains(got, `"client":"ip:2001:db8::/64"`) {
		t.Fatalf("2001:db8::1 = %s, want allowed as ip:2001:db8::/64", got)
	}
	for _, ip := range []string{"[2001:db8::1]", "[2001:db8::2]:443", "2001:db8::ffff"} {
		if got := post(t, s, `{"ip":"`+ip+`"}`).Body.String(); !strings.HasPrefix(got, `{"allowed":false`) || !strings.Contains(got, `"client":"ip:2001:db8::/64"`) {
			t.Errorf("%s = %s, want denied as ip:2001:db8::/64", ip, got)
		}
	}
}

// FuzzCheckDecides: whatever a caller puts in user, api_key, ip, the
// method or the path, a check of that shape is answered 200 with a
// decision.
func FuzzCheckDecides(f *testing.F) {
	f.Add("alice", "", "", "GET", "/api/orders")
	f.Add(strings.Repeat("u", 300), "k\x7f", "[::1]:80", "get", "/api%2F./../orders;x?q#f")
	f.Add("\xff", "\xc3(", "not-an-ip", "G\xffT", "/\xff\x00 x")
	s, _ := newTestServer(f, &rules.Set{Rules: []rules.Rule{
		{ID: "api", Match: rules.Match{Endpoint: "GET /api/*", PathCase: rules.PathCaseInsensitive}, Limit: 1000, Window: seconds(time.Minute)},
		{ID: "all", Limit: 1000, Window: seconds(time.Minute)},
	}}, Config{})
	f.Fuzz(func(t *testing.T, user, apiKey, ip, method, path string) {
		if len(user)+len(apiKey)+len(ip)+len(method)+len(path) > 16<<10 {
			return
		}
		if user == "" && apiKey == "" && ip == "" {
			user = "anonymous"
		}
		if method == "" || strings.Contains(method, " ") {
			method = "GET"
		}
		body := `{"user":` + rawJSONString(user) + `,"api_key":` + rawJSONString(apiKey) + `,"ip":` + rawJSONString(ip) +
			`,"endpoint":` + rawJSONString(method+" "+path) + `}`
		w := post(t, s, body)
		if w.Code != http.StatusOK || !utf8.Valid(w.Body.Bytes()) {
			t.Fatalf("POST %q = %d %q, want 200 with a UTF-8 decision", body, w.Code, w.Body)
		}
	})
}

const hexDigits = "0123456789abcdef"
