package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/rules"
)

// FuzzAdminPutRule feeds arbitrary bodies to PUT /rules/{id}: the answer is
// never a 5xx and never a panic, a 2xx stores exactly the rule it returns,
// and the rewritten file reads back.
func FuzzAdminPutRule(f *testing.F) {
	seeds := []struct{ id, body string }{
		{"a", ruleA},
		{"a", `{"id": "a", "limit": 5, "window": "1s", "burst": 10, "algorithm": "leaky_bucket", "by": "ip", "failure_mode": "closed", "shadow": true, "enabled": false}`},
		{"b", `{"limit": 1, "window": "7d", "description": "yes", "match": {"plan": "null", "endpoint": "* /api/*"}}`},
		{"c", `{"limit": 10000, "window": "500ms", "algorithm": "sliding_log", "description": "line\nbreak: true # not a comment"}`},
		{"a", `{"limit": 0, "window": "1m"}`},
		{"a", `{"limit": -5}`},
		{"a", `{"limit": 1e3, "window": "1m"}`},
		{"a", `{"limit": 99999999999999999999, "window": "1m"}`},
		{"a", `{"match": {"endpoint": "/x"}, "limit": 1, "window": "1m"}`},
		{"a", `{"id": "b", "limit": 1, "window": "1m"}`},
		{"a", `{"limit": 1, "window": "1m"`},
		{"a", `{"limit": 1, "limit": 2, "window": "1m"}`},
		{"a", `null`},
		{"a", `[1, 2]`},
		{"a", `"a"`},
		{"a", ``},
		{"a", "\xff\xfe"},
		{"Bad", `{"limit": 1, "window": "1m"}`},
		{"a", `{"description": "\u0000", "limit": 1, "window": "1m"}`},
		{"a", `{"description": "\ud800", "limit": 1, "window": "1m"}`},
		{"a", `[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`},
	}
	for _, s := range seeds {
		f.Add(s.id, []byte(s.body))
	}
	e := newEnv(f, Config{})
	f.Fuzz(func(t *testing.T, id string, body []byte) {
		req := httptest.NewRequest("PUT", "http://127.0.0.1:9090/", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.URL = &url.URL{Path: "/rules/" + id, RawPath: "/rules/" + url.PathEscape(id)}
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("PUT /rules/%q %q = %d %s", id, body, rec.Code, rec.Body)
		}
		if rec.Code >= 300 && rec.Code < 400 {
			return // ServeMux redirecting an unclean path ("/rules/.")
		}
		var out map[string]json.RawMessage
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("response %q is not a JSON object: %v", rec.Body, err)
		}
		if rec.Code >= 300 {
			if _, ok := out["message"]; !ok {
				t.Fatalf("error response %s has no message", rec.Body)
			}
			return
		}
		stored, ok := e.src.Current().Rule(id)
		if !ok {
			t.Fatalf("PUT /rules/%q = %d but the rule is not in force", id, rec.Code)
		}
		got, err := json.Marshal(stored.Rule)
		if err != nil {
			t.Fatal(err)
		}
		var want struct{ Rule rules.Rule }
		json.Unmarshal(rec.Body.Bytes(), &want)
		// Compare values, not bytes: encoders may escape the same text
		// differently ("&" or "\u0026").
		if wb, _ := json.Marshal(want.Rule); !bytes.Equal(got, wb) {
			t.Fatalf("stored rule %s, returned %s", got, rec.Body)
		}
		b, err := os.ReadFile(e.path)
		if err != nil {
			t.Fatal(err)
		}
		set, err := rules.ParseYAML(b)
		if err != nil {
			t.Fatalf("rules file written for %q does not read back: %v\n%s", body, err, b)
		}
		if len(set.Rules) != 1 {
			t.Fatalf("rules file holds %d rules, want 1", len(set.Rules))
		}
		if rb, _ := json.Marshal(set.Rules[0]); !bytes.Equal(rb, got) {
			t.Fatalf("rule read back from the file = %s, want %s", rb, got)
		}
		// Keep the set small so that every run costs the same.
		if _, err := e.src.Update(context.Background(), -1, func(s *rules.Set) error {
			s.Rules = nil
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzGuard: no Host and Origin a caller sends make the guard panic, and
// every Host it accepts is empty, localhost, an IP address or a name it
// was given; every Origin it accepts is the request's own or one given.
func FuzzGuard(f *testing.F) {
	for _, s := range [][2]string{
		{"127.0.0.1:9090", ""}, {"rebind.evil.example", "http://rebind.evil.example"}, {"[::1]:9090", "http://[::1]:9090"},
		{"localhost.", "null"}, {"LB.example:443", "HTTPS://console.example:443/"}, {"[fe80::1%25eth0]", "http://[::1"},
		{"admin.internal", "http://admin.internal:80"}, {"%", "http://%41"}, {"", "https://user@console.example"},
	} {
		f.Add(s[0], s[1])
	}
	g := newGuard(Config{Listen: "admin.internal:9090", AllowedHosts: []string{"lb.example"}, AllowedOrigins: []string{"https://console.example"}})
	f.Fuzz(func(t *testing.T, host, origin string) {
		r := httptest.NewRequest("GET", "http://127.0.0.1/rules", nil)
		r.Host = host
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		if g.check(r) != nil {
			return
		}
		h := hostOf(host)
		_, ipErr := netip.ParseAddr(h)
		if host != "" && h != "localhost" && h != "admin.internal" && h != "lb.example" && ipErr != nil {
			t.Fatalf("Host %q (%q) accepted", host, h)
		}
		if origin != "" {
			o, ok := normOrigin(origin)
			own, _ := normOrigin("http://" + host)
			if !ok || o != "https://console.example" && o != own {
				t.Fatalf("Origin %q (%q) accepted with Host %q", origin, o, host)
			}
		}
	})
}

// FuzzParseTokens: a --admin-token value never panics the parser, a value
// it accepts has no blank token, and a malformed one accepts no one.
func FuzzParseTokens(f *testing.F) {
	for _, s := range []string{"", " ", ",", " , ", "s3cret", "alice:s1,bob:s2", "alice:", ":x", "a,,b", "a b", "\xff"} {
		f.Add(s, "x")
	}
	f.Fuzz(func(t *testing.T, value, sent string) {
		tk := ParseTokens(value)
		if value != "" && !tk.Set() {
			t.Fatalf("ParseTokens(%q): no authentication", value)
		}
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", "Bearer "+sent)
		_, ok := tk.Check(r)
		if tk.Err() != nil && ok {
			t.Fatalf("malformed ParseTokens(%q) accepts %q", value, sent)
		}
		if ok && strings.TrimSpace(sent) == "" {
			t.Fatalf("ParseTokens(%q) accepts a blank token", value)
		}
	})
}
