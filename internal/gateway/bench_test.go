package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// benchCalls makes GET calls to url over keep-alive connections, in
// parallel, and reports calls/s.
func benchCalls(b *testing.B, url string) {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := c.Get(url)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}

// BenchmarkGateway compares calling a loopback upstream directly with
// calling it through the gateway (embedded store, one rule that allows
// every call). Client, gateway and upstream share the machine, so the
// ratio, not the absolute numbers, is the point; bench/gateway.sh measures
// the built binary with wrk.
func BenchmarkGateway(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = []string{"application/json"}
		io.WriteString(w, `{"id":42,"status":"shipped","items":3,"total":"59.90"}`+"\n")
	}))
	defer up.Close()
	b.Run("direct", func(b *testing.B) { benchCalls(b, up.URL+"/api/orders") })
	b.Run("gateway", func(b *testing.B) {
		l := newLimiter(b, `
rules:
  - {id: per-ip, by: ip, limit: 1000000000, window: 1m}
`)
		gw := newGateway(b, l, up.URL, nil)
		benchCalls(b, gw.URL+"/api/orders")
	})
}
