package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestWrongMethodIsJSON: a GET on /ratelimit/check (and a POST on the
// probes) is a 405 in the same JSON error shape as every other error of
// the data plane and of the admin API, with Allow — not net/http's plain
// text.
func TestWrongMethodIsJSON(t *testing.T) {
	s, _ := newTestServer(t, nil, Config{})
	for _, tc := range []struct{ method, path, allow string }{
		{"GET", "/ratelimit/check", "POST"},
		{"PUT", "/ratelimit/check", "POST"},
		{"POST", "/healthz", "GET, HEAD"},
		{"POST", "/readyz", "GET, HEAD"},
	} {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		var body struct{ Error, Message string }
		if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Content-Type") != "application/json" ||
			json.Unmarshal(rec.Body.Bytes(), &body) != nil || body.Error != "method_not_allowed" || body.Message == "" {
			t.Errorf("%s %s = %d %q %q, want 405 application/json {\"error\":\"method_not_allowed\",…}",
				tc.method, tc.path, rec.Code, rec.Header().Get("Content-Type"), rec.Body.String())
		}
		if got := rec.Header().Get("Allow"); got != tc.allow {
			t.Errorf("%s %s: Allow %q, want %q", tc.method, tc.path, got, tc.allow)
		}
	}
}

// TestReadyHandler: the gateway's /readyz (ReadyHandler) answers as the
// data plane's does: one line, status first, 503 when not ready.
func TestReadyHandler(t *testing.T) {
	detail := map[string]any{"rules": map[string]any{"revision": 3}, "store": map[string]any{"kind": "memory"}}
	for _, ok := range []bool{true, false} {
		ready := func() (bool, map[string]any) { return ok, detail }
		want := httptest.NewRecorder()
		s, _ := newTestServer(t, nil, Config{Ready: ready})
		s.ServeHTTP(want, httptest.NewRequest("GET", "/readyz", nil))
		got := httptest.NewRecorder()
		ReadyHandler(ready).ServeHTTP(got, httptest.NewRequest("GET", "/readyz", nil))
		if got.Code != want.Code || got.Body.String() != want.Body.String() || got.Header().Get("Content-Type") != "application/json" {
			t.Errorf("ReadyHandler (ready %v) = %d %q, want %d %q", ok, got.Code, got.Body, want.Code, want.Body)
		}
	}
}
