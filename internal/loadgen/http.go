package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
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
// keep-alive HTTP/1.1 connections, one per worker, each call with a body
// drawn at random from a pre-built set. It is safe for concurrent use; each
// worker uses its own Call.
type HTTPCheck struct {
	url    string
	client *http.Client
	bodies [][]byte
	seed   uint64
}

// NewHTTPCheck returns an HTTPCheck against the service at baseURL (e.g.
// http://127.0.0.1:8080) with connections for concurrency workers and a
// per-call timeout.
func NewHTTPCheck(baseURL string, concurrency int, timeout time.Duration, bodies [][]byte) (*HTTPCheck, error) {
	if !strings.HasPrefix(baseURL, "http://") && !strings.HasPrefix(baseURL, "https://") {
		return nil, fmt.Errorf("loadgen: target must be an http:// or https:// URL, got %q", baseURL)
	}
	if len(bodies) == 0 {
		return nil, fmt.Errorf("loadgen: no request bodies")
	}
	tr := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          concurrency,
		MaxIdleConnsPerHost:   concurrency,
		MaxConnsPerHost:       concurrency,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
		ResponseHeaderTimeout: timeout,
	}
	return &HTTPCheck{
		url:    strings.TrimSuffix(baseURL, "/") + "/ratelimit/check",
		client: &http.Client{Transport: tr, Timeout: timeout},
		bodies: bodies,
		seed:   rand.Uint64(),
	}, nil
}

// URL returns the check endpoint's URL.
func (h *HTTPCheck) URL() string { return h.url }

// Close closes idle connections.
func (h *HTTPCheck) Close() { h.client.CloseIdleConnections() }

// NewCall returns worker's Call, with its own random source and read buffer.
func (h *HTTPCheck) NewCall(worker int) Call {
	rng := rand.New(rand.NewPCG(h.seed, uint64(worker)))
	buf := new(bytes.Buffer)
	return func(ctx context.Context) (bool, error) {
		return h.do(ctx, h.bodies[rng.IntN(len(h.bodies))], buf)
	}
}

var (
	allowedTrue  = []byte(`"allowed":true`)
	allowedFalse = []byte(`"allowed":false`)
)

// do posts one body and reads the decision, reusing buf for the answer.
func (h *HTTPCheck) do(ctx context.Context, body []byte, buf *bytes.Buffer) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		return false, err
	}
	buf.Reset()
	_, err = buf.ReadFrom(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if err != nil {
		return false, err
	}
	if resp.StatusCode != http.StatusOK {
		msg := bytes.TrimSpace(buf.Bytes())
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return false, fmt.Errorf("loadgen: %s: %s", resp.Status, msg)
	}
	// The service's encoder writes compact JSON; fall back to decoding for
	// any other spelling.
	b := buf.Bytes()
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
