package loadgen

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// CheckBodies pre-builds n distinct bodies for POST /ratelimit/check, one per
// client of the keyspace, so that no JSON is encoded while measuring. In
// "user" mode client i is {"user":"u<i>"}, in "ip" mode it is the address
// 10.x.y.z numbered i. Every body names endpoint.
func CheckBodies(n int, mode, endpoint string) ([][]byte, error) {
	if n < 1 {
		return nil, fmt.Errorf("loadgen: clients must be ≥ 1, got %d", n)
	}
	if n > 1<<24 {
		return nil, fmt.Errorf("loadgen: clients must be ≤ %d, got %d", 1<<24, n)
	}
	ep, err := json.Marshal(endpoint)
	if err != nil {
		return nil, err
	}
	bodies := make([][]byte, n)
	var b []byte
	for i := range bodies {
		b = b[:0]
		switch mode {
		case "user":
			b = append(b, `{"user":"u`...)
			b = strconv.AppendInt(b, int64(i), 10)
		case "ip":
			b = append(b, `{"ip":"10.`...)
			b = strconv.AppendInt(b, int64(i>>16&0xff), 10)
			b = append(b, '.')
			b = strconv.AppendInt(b, int64(i>>8&0xff), 10)
			b = append(b, '.')
			b = strconv.AppendInt(b, int64(i&0xff), 10)
		default:
			return nil, fmt.Errorf("loadgen: client mode must be user or ip, got %q", mode)
		}
		b = append(b, `","endpoint":`...)
		b = append(b, ep...)
		b = append(b, '}')
		bodies[i] = bytes.Clone(b)
	}
	return bodies, nil
}

// HTTPCheck calls a sluice data plane's POST /ratelimit/check over
// keep-alive HTTP/1.1 connections, one per worker (see Conn), each call
// with a body drawn at random from a pre-built set. It is safe for
// concurrent use; each worker uses its own Call.
type HTTPCheck struct {
	url     string
	tls     *tls.Config // for an https:// URL
	head    []byte      // the request up to "Content-Length: "
	timeout time.Duration
	bodies  [][]byte
	seed    uint64

	mu    sync.Mutex
	conns []*Conn
}

// NewHTTPCheck returns an HTTPCheck against the service at baseURL (e.g.
// http://127.0.0.1:8080) with a per-call timeout. concurrency is a hint
// for how many workers will call it.
func NewHTTPCheck(baseURL string, concurrency int, timeout time.Duration, bodies [][]byte, auth Auth) (*HTTPCheck, error) {
	if !strings.HasPrefix(baseURL, "http://") && !strings.HasPrefix(baseURL, "https://") {
		return nil, fmt.Errorf("loadgen: target must be an http:// or https:// URL, got %q", baseURL)
	}
	if auth.TLS != nil && !strings.HasPrefix(baseURL, "https://") {
		return nil, fmt.Errorf("loadgen: TLS settings given for %q; want an https:// URL", baseURL)
	}
	if len(bodies) == 0 {
		return nil, fmt.Errorf("loadgen: no request bodies")
	}
	u, err := url.Parse(strings.TrimSuffix(baseURL, "/") + "/ratelimit/check")
	if err != nil {
		return nil, fmt.Errorf("loadgen: target: %w", err)
	}
	head := "POST " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host +
		"\r\nUser-Agent: sluice-bench\r\nContent-Type: application/json\r\n"
	if auth.Token != "" {
		if strings.ContainsAny(auth.Token, "\r\n") {
			return nil, fmt.Errorf("loadgen: the token holds a line break")
		}
		head += "Authorization: Bearer " + auth.Token + "\r\n"
	}
	head += "Content-Length: "
	return &HTTPCheck{
		url:     u.String(),
		tls:     auth.TLS,
		head:    []byte(head),
		timeout: timeout,
		bodies:  bodies,
		seed:    rand.Uint64(),
		conns:   make([]*Conn, 0, concurrency),
	}, nil
}

// URL returns the check endpoint's URL.
func (h *HTTPCheck) URL() string { return h.url }

// Close closes the workers' connections.
func (h *HTTPCheck) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		c.Close()
	}
}

// NewCall returns worker's Call, with its own connection, random source and
// request buffer.
func (h *HTTPCheck) NewCall(worker int) Call {
	rng := rand.New(rand.NewPCG(h.seed, uint64(worker)))
	var conn *Conn
	var err error
	if strings.HasPrefix(h.url, "https://") {
		conn, err = NewConnTLS(h.url, h.timeout, h.tls)
	} else {
		conn, err = NewConn(h.url, h.timeout)
	}
	if err != nil { // NewHTTPCheck checked the URL
		panic(err)
	}
	h.mu.Lock()
	h.conns = append(h.conns, conn)
	h.mu.Unlock()
	var req []byte
	return func(ctx context.Context) (bool, error) {
		body := h.bodies[rng.IntN(len(h.bodies))]
		req = append(req[:0], h.head...)
		req = strconv.AppendInt(req, int64(len(body)), 10)
		req = append(req, "\r\n\r\n"...)
		req = append(req, body...)
		return h.decide(conn.Do(ctx, req))
	}
}

var (
	allowedTrue  = []byte(`"allowed":true`)
	allowedFalse = []byte(`"allowed":false`)
)

// decide reads the decision from one answer.
func (h *HTTPCheck) decide(status int, b []byte, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	if status != http.StatusOK {
		msg := bytes.TrimSpace(b)
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return false, fmt.Errorf("loadgen: %d %s: %s", status, http.StatusText(status), msg)
	}
	// The service's encoder writes compact JSON; fall back to decoding for
	// any other spelling.
	switch {
	case bytes.Contains(b, allowedTrue):
		return true, nil
	case bytes.Contains(b, allowedFalse):
		return false, nil
	}
	var d struct {
		Allowed *bool `json:"allowed"`
	}
	if err := json.Unmarshal(b, &d); err != nil || d.Allowed == nil {
		return false, fmt.Errorf("loadgen: answer without a decision: %.200s", b)
	}
	return *d.Allowed, nil
}
