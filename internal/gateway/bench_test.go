package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/console"
	"github.com/sluicehq/sluice/internal/gateway"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/seam/mwhook"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/middleware"
)

// benchCalls makes GET calls to url over keep-alive connections — one at a
// time (serial: ns/op is the latency of a call) or from 16 goroutines
// (parallel: calls/s is the throughput) — and reports calls/s.
func benchCalls(b *testing.B, url string, parallel bool) {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	get := func() bool {
		resp, err := c.Get(url)
		if err != nil {
			b.Error(err)
			return false
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Errorf("status %d", resp.StatusCode)
			return false
		}
		return true
	}
	b.ReportAllocs()
	if parallel {
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() && get() {
			}
		})
	} else {
		for b.Loop() {
			if !get() {
				break
			}
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}

// BenchmarkGateway compares calling a loopback upstream directly with
// calling it through the gateway (embedded store, one rule that allows
// every call), serially and in parallel. Client, gateway and upstream share
// the process and the machine, so the difference and the ratio, not the
// absolute numbers, are the point; bench/gateway.sh measures the built
// binary with wrk and a fixed-rate load generator.
func BenchmarkGateway(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = []string{"application/json"}
		io.WriteString(w, `{"id":42,"status":"shipped","items":3,"total":"59.90"}`+"\n")
	}))
	defer up.Close()
	l := newLimiter(b, `
rules:
  - {id: per-ip, by: ip, limit: 1000000000, window: 1m}
`)
	gw := newGateway(b, l, up.URL, nil)
	for _, mode := range []struct {
		name     string
		parallel bool
	}{{"serial", false}, {"parallel", true}} {
		b.Run("direct/"+mode.name, func(b *testing.B) { benchCalls(b, up.URL+"/api/orders", mode.parallel) })
		b.Run("gateway/"+mode.name, func(b *testing.B) { benchCalls(b, gw.URL+"/api/orders", mode.parallel) })
	}
}

// discardWriter is a ResponseWriter that keeps the headers and drops the
// body, reused across calls like a server's.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(status int)      { w.status = status }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkGatewayHandler is the gateway's own share of an allowed call:
// its ServeHTTP on a parsed request (no client connection, no server
// parsing in front of it), the upstream on loopback. The upstream's
// allocations are in allocs/op too, the same in every run, so that a change
// of allocs/op is the gateway's. The deny case never reaches the upstream.
func BenchmarkGatewayHandler(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = []string{"application/json"}
		io.WriteString(w, `{"id":42,"status":"shipped","items":3,"total":"59.90"}`+"\n")
	}))
	defer up.Close()
	for _, c := range []struct{ name, limit string }{{"allow", "1000000000"}, {"deny", "1"}} {
		b.Run(c.name, func(b *testing.B) {
			l := newLimiter(b, `
rules:
  - {id: per-ip, by: ip, limit: `+c.limit+`, window: 1h}
`)
			u, _ := url.Parse(up.URL)
			cfg := gateway.Config{Upstream: u}
			if os.Getenv("SLUICE_BENCH_CONSOLE") == "on" {
				// As sluice gateway --admin-listen: every decision counted
				// in the metrics, the denials fed to the top list.
				m := metrics.New()
				m.SetRules(l.Rules())
				feed := console.NewFeed(console.NewHitters(0, nil), limiter.Config{})
				cfg.Middleware = []middleware.Option{mwhook.Observe(console.Observe(m, feed, l)).(middleware.Option)}
			}
			gw, err := gateway.New(l, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer gw.Close()
			want := 200
			if c.name == "deny" {
				want = 429
				gw.ServeHTTP(&discardWriter{h: http.Header{}}, httptest.NewRequest("GET", "/api/orders", nil))
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				w := &discardWriter{h: make(http.Header, 8)}
				r := httptest.NewRequest("GET", "/api/orders", nil)
				r.RemoteAddr = "192.0.2.1:1234"
				for pb.Next() {
					clear(w.h)
					gw.ServeHTTP(w, r)
					if w.status != want {
						b.Fatalf("status %d, want %d", w.status, want)
					}
				}
			})
		})
	}
}
