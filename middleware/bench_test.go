package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/middleware"
)

// BenchmarkMiddleware is the cost of the filter itself, in-process: identity
// (peer behind a trusted proxy, X-Forwarded-For), one matching rule on the
// embedded store, the quota headers; callers spread over 10,000 addresses.
func BenchmarkMiddleware(b *testing.B) {
	l := newLimiter(b, `
rules:
  - {id: per-ip, by: ip, limit: 1000000000, window: 1m}
`)
	h := middleware.Middleware(l, middleware.WithIdentifier(&middleware.Identifier{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
	}))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		reqs := make([]*http.Request, 10000)
		for i := range reqs {
			r := httptest.NewRequest("GET", "/api/orders", nil)
			r.RemoteAddr = "10.0.0.2:5555"
			r.Header.Set("X-Forwarded-For", "203.0."+strconv.Itoa(i>>8)+"."+strconv.Itoa(i&0xff))
			reqs[i] = r
		}
		w := &discardWriter{h: http.Header{}}
		i := 0
		for pb.Next() {
			clear(w.h)
			h.ServeHTTP(w, reqs[i%len(reqs)])
			i++
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}
