package loadgen

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func get(path string) []byte {
	return []byte("GET " + path + " HTTP/1.1\r\nHost: test\r\n\r\n")
}

// TestConn runs Conn against a real net/http server: fixed-length and
// chunked answers on one keep-alive connection, an answer with
// Connection: close and one the server cuts off (both redialled on the next
// call, never resent), and a call past its timeout.
func TestConn(t *testing.T) {
	var conns atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/fixed", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "fixed") })
	mux.HandleFunc("/chunked", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "chun")
		w.(http.Flusher).Flush()
		io.WriteString(w, "ked")
	})
	mux.HandleFunc("/close", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusTeapot)
	})
	mux.HandleFunc("/hijack", func(w http.ResponseWriter, r *http.Request) {
		c, _, _ := w.(http.Hijacker).Hijack()
		c.Close()
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) { time.Sleep(300 * time.Millisecond) })
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()

	c, err := NewConn(srv.URL, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for i, tt := range []struct {
		path   string
		status int
		body   string
		conns  int64 // connections the server has seen after the call
	}{
		{"/fixed", 200, "fixed", 1},
		{"/chunked", 200, "chunked", 1},
		{"/fixed", 200, "fixed", 1},
		{"/close", 418, "", 1},
		{"/fixed", 200, "fixed", 2},
	} {
		status, body, err := c.Do(ctx, get(tt.path))
		if err != nil || status != tt.status || string(body) != tt.body {
			t.Fatalf("call %d %s = %d %q %v, want %d %q", i, tt.path, status, body, err, tt.status, tt.body)
		}
		if n := conns.Load(); n != tt.conns {
			t.Errorf("after call %d %s: server saw %d connections, want %d", i, tt.path, n, tt.conns)
		}
	}
	if _, _, err := c.Do(ctx, get("/hijack")); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("connection cut before the answer: err = %v, want %v", err, io.ErrUnexpectedEOF)
	}
	if _, _, err := c.Do(ctx, get("/slow")); err == nil || !strings.Contains(err.Error(), "timeout") {
		t.Errorf("slow answer: err = %v, want a timeout", err)
	}
	if status, body, err := c.Do(ctx, get("/fixed")); err != nil || status != 200 || string(body) != "fixed" {
		t.Errorf("after errors: %d %q %v, want 200 \"fixed\"", status, body, err)
	}
	if _, err := NewConn("https://127.0.0.1:1/", time.Second); err == nil {
		t.Error("NewConn(https) = nil error, want one")
	}
}
