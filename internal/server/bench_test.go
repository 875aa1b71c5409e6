package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/flatjson"
	"github.com/sluicehq/sluice/rules"
)

var benchBody = []byte(`{"user":"alice","api_key":"k_live_42","ip":"203.0.113.7","plan":"free","endpoint":"GET /api/orders","cost":1}`)

// jsonCheck is a check request as encoding/json would decode it.
type jsonCheck struct {
	User     *string `json:"user"`
	APIKey   *string `json:"api_key"`
	IP       *string `json:"ip"`
	Plan     *string `json:"plan"`
	Endpoint *string `json:"endpoint"`
	Cost     *int64  `json:"cost"`
}

func BenchmarkParseCheck(b *testing.B) {
	b.Run("tokenizer", func(b *testing.B) { // what the handler runs: pooled buffers, no copy
		b.ReportAllocs()
		b.SetBytes(int64(len(benchBody)))
		var esc []byte
		var req CheckRequest
		for b.Loop() {
			if err := parseCheck(benchBody, &esc, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ParseCheck", func(b *testing.B) { // the exported form: copies the body
		b.ReportAllocs()
		b.SetBytes(int64(len(benchBody)))
		for b.Loop() {
			if _, err := ParseCheck(benchBody); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("escaped", func(b *testing.B) {
		body := []byte(`{"user":"al\u00efce","api_key":"k_live_42","ip":"203.0.113.7","endpoint":"GET \/api\/orders"}`)
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		var esc []byte
		var req CheckRequest
		for b.Loop() {
			if err := parseCheck(body, &esc, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding_json", func(b *testing.B) { // the alternative: a strict decoder into a struct, then the same validation
		b.ReportAllocs()
		b.SetBytes(int64(len(benchBody)))
		rd := bytes.NewReader(nil)
		for b.Loop() {
			rd.Reset(benchBody)
			dec := json.NewDecoder(rd)
			dec.DisallowUnknownFields()
			var j jsonCheck
			if err := dec.Decode(&j); err != nil {
				b.Fatal(err)
			}
			var r flatjson.Fields
			for f, p := range []*string{j.User, j.APIKey, j.IP, j.Plan, j.Endpoint} {
				if p != nil {
					r.Kind[f], r.Text[f] = flatjson.String, *p
				}
			}
			var req CheckRequest
			if err := validate(&r, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("std_decoder", func(b *testing.B) { benchStdDecoder(b, benchBody, false) }) // the fallback, Config.JSONDecoder "std"
}

// benchStdDecoder runs the std decoder on body, a check body or, when
// reserve, a reserve body.
func benchStdDecoder(b *testing.B, body []byte, reserve bool) {
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	var req ReserveRequest
	var wait *int64
	if reserve {
		wait = &req.MaxWaitMS
	}
	for b.Loop() {
		if err := parseBody(true, body, nil, &req.CheckRequest, wait); err != nil {
			b.Fatal(err)
		}
	}
}

// reqBody is a request body that can be refilled, so that one
// *http.Request serves every iteration.
type reqBody struct{ bytes.Reader }

func (*reqBody) Close() error { return nil }

// benchSet lets every call pass, so each one takes the full path: match,
// take, answer with headers.
func benchSet() *rules.Set {
	return &rules.Set{DefaultPlan: "free", Rules: []rules.Rule{{
		ID: "free-per-user", Match: rules.Match{Plan: "free"}, Limit: 1_000_000_000,
		Window: rules.Duration(time.Second), Algorithm: algorithm.TokenBucket,
	}}}
}

// benchBodies are check bodies of distinct users.
func benchBodies(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, `{"user":"user-%d","ip":"203.0.113.7","endpoint":"GET /api/orders","cost":1}`, i)
	}
	return out
}

// baseline is the bar the check handler is measured against: a bare
// net/http handler that decodes the same JSON with encoding/json and encodes
// a fixed answer.
func baseline() http.Handler {
	type answer struct {
		Allowed      bool   `json:"allowed"`
		Limit        int64  `json:"limit"`
		Remaining    int64  `json:"remaining"`
		ResetAfterMS int64  `json:"reset_after_ms"`
		RetryAfterMS int64  `json:"retry_after_ms"`
		Rule         string `json:"rule"`
		Client       string `json:"client"`
	}
	fixed := answer{Allowed: true, Limit: 100, Remaining: 99, ResetAfterMS: 600, Rule: "free-per-user", Client: "user:alice"}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			User, APIKey, IP, Plan, Endpoint string
			Cost                             int64
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(fixed) //nolint:errcheck
	})
}

func BenchmarkCheckHandler(b *testing.B) {
	s, _ := newTestServer(b, benchSet(), Config{})
	bodies := benchBodies(1024)
	for _, h := range []struct {
		name string
		h    http.Handler
	}{{"sluice", s}, {"baseline", baseline()}} {
		b.Run(h.name, func(b *testing.B) {
			r := httptest.NewRequest("POST", "/ratelimit/check", nil)
			rb := &reqBody{}
			r.Body = rb
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				body := bodies[i%len(bodies)]
				rb.Reset(body)
				r.ContentLength = int64(len(body))
				w := httptest.NewRecorder()
				h.h.ServeHTTP(w, r)
				if w.Code != 200 {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
				i++
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
		b.Run(h.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := httptest.NewRequest("POST", "/ratelimit/check", nil)
				rb := &reqBody{}
				r.Body = rb
				i := 0
				for pb.Next() {
					body := bodies[i%len(bodies)]
					rb.Reset(body)
					r.ContentLength = int64(len(body))
					w := httptest.NewRecorder()
					h.h.ServeHTTP(w, r)
					if w.Code != 200 {
						b.Errorf("status %d: %s", w.Code, w.Body)
						return
					}
					i++
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

// BenchmarkCheckHTTP measures over loopback HTTP/1.1 with keep-alive, the
// way the service is used; the client's cost is in both numbers.
func BenchmarkCheckHTTP(b *testing.B) {
	s, _ := newTestServer(b, benchSet(), Config{})
	bodies := benchBodies(1024)
	for _, h := range []struct {
		name string
		h    http.Handler
	}{{"sluice", s}, {"baseline", baseline()}} {
		b.Run(h.name, func(b *testing.B) {
			srv := httptest.NewServer(h.h)
			defer srv.Close()
			tr := &http.Transport{MaxIdleConnsPerHost: 64}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr}
			url := srv.URL + "/ratelimit/check"
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					resp, err := c.Post(url, "application/json", bytes.NewReader(bodies[i%len(bodies)]))
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body) //nolint:errcheck
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
					i++
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

var reserveBody = []byte(`{"user":"api.partner.example","plan":"egress","endpoint":"POST /v1/messages","cost":1,"max_wait_ms":2000}`)

// BenchmarkParseReserve: the tokenizer that parses check bodies, taking
// max_wait_ms too, against the former two passes (encoding/json splits
// max_wait_ms off and re-encodes the rest, then the check parser).
func BenchmarkParseReserve(b *testing.B) {
	b.Run("tokenizer", func(b *testing.B) { // what the handler runs: pooled buffers, no copy
		b.ReportAllocs()
		b.SetBytes(int64(len(reserveBody)))
		var esc []byte
		var req ReserveRequest
		for b.Loop() {
			if err := parseReserve(reserveBody, &esc, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("std_decoder", func(b *testing.B) { benchStdDecoder(b, reserveBody, true) }) // the fallback, Config.JSONDecoder "std"
	b.Run("two_pass", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(reserveBody)))
		for b.Loop() {
			if _, err := parseReserveTwoPass(reserveBody); err != nil {
				b.Fatal(err)
			}
		}
	})
}
