package jsonhttp

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "plain", `"quoted" \ back`, "ctl \x00\x01\x1f\x7f\n\r\t\b\f", "é東京😀", "\u2028\u2029", "<>&"} {
		b := AppendString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil || got != s {
			t.Errorf("AppendString(%q) = %s, decodes to %q, %v", s, b, got, err)
		}
	}
	if got, want := string(AppendString(nil, "a\xffb")), `"a\ufffdb"`; got != want {
		t.Errorf("AppendString(invalid UTF-8) = %s, want %s", got, want)
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "a\"b", "\x00\u2028é", "a\xffb\xc0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := AppendString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("AppendString(%q) = %s, not JSON: %v", s, b, err)
		}
		want, _ := json.Marshal(s) // encoding/json also replaces invalid UTF-8 with U+FFFD
		var w string
		json.Unmarshal(want, &w)
		if got != w {
			t.Fatalf("AppendString(%q) decodes to %q, want %q", s, got, w)
		}
	})
}

func TestWriteError(t *testing.T) {
	for _, tt := range []struct{ code, message string }{
		{"unavailable", "the rate limiter could not decide"},
		{"invalid_request", `user: "a\b" must not contain control characters: ` + "\x01\n"},
		{"forbidden", "Host: \"évil.example\u2028\" is not a name of this admin API"},
	} {
		rec := httptest.NewRecorder()
		rec.Header().Set("Content-Length", "12345") // a stale value set earlier: replaced
		WriteError(rec, http.StatusServiceUnavailable, tt.code, tt.message)
		if rec.Code != http.StatusServiceUnavailable {
			t.Errorf("WriteError(%q): status %d, want 503", tt.code, rec.Code)
		}
		if got := rec.Header().Get("Content-Type"); got != "application/json" {
			t.Errorf("WriteError(%q): Content-Type %q, want application/json", tt.code, got)
		}
		if got, want := rec.Header().Get("Content-Length"), strconv.Itoa(rec.Body.Len()); got != want {
			t.Errorf("WriteError(%q): Content-Length %s, want %s", tt.code, got, want)
		}
		var body map[string]string
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("WriteError(%q): body %q is not JSON: %v", tt.code, rec.Body, err)
		}
		if len(body) != 2 || body["error"] != tt.code || body["message"] != tt.message {
			t.Errorf("WriteError(%q, %q): body %v, want error and message as given", tt.code, tt.message, body)
		}
		if b := rec.Body.Bytes(); b[len(b)-1] != '\n' {
			t.Errorf("WriteError(%q): body %q does not end in a newline", tt.code, b)
		}
	}
}

func TestSetContentTypeAllocatesNothing(t *testing.T) {
	h := http.Header{}
	if n := testing.AllocsPerRun(100, func() { SetContentType(h) }); n != 0 {
		t.Errorf("SetContentType: %v allocations, want 0", n)
	}
	if got := h.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type %q, want application/json", got)
	}
}
