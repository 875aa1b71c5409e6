package middleware_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/middleware"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/memory"
)

// A Go service limits its own handlers in-process: 2 calls a minute per
// client address on /api, with the client's address taken from
// X-Forwarded-For when the call comes through the load balancer at
// 10.0.0.0/8. (With several instances, use store/redis instead of the
// embedded store for one shared limit.)
func Example() {
	store, err := memory.New(memory.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	set, err := rules.ParseYAML([]byte(`
rules:
  - id: api-per-ip
    match: {endpoint: "* /api/*"}
    by: ip
    limit: 2
    window: 1m
`))
	if err != nil {
		log.Fatal(err)
	}
	ix, err := rules.Compile(set)
	if err != nil {
		log.Fatal(err)
	}
	lim := limiter.New(store, limiter.Config{})
	lim.SetRules(ix)

	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "orders")
	})
	limit := middleware.Middleware(lim, middleware.WithIdentifier(&middleware.Identifier{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
	}))
	handler := limit(api) // in a service: http.ListenAndServe(":8080", handler)

	for range 3 {
		r := httptest.NewRequest("GET", "/api/orders", nil)
		r.RemoteAddr = "10.0.0.2:41000"                // the load balancer
		r.Header.Set("X-Forwarded-For", "203.0.113.7") // the client it saw
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		fmt.Printf("%d remaining=%s retry-after=%q\n", w.Code, w.Header().Get("X-RateLimit-Remaining"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 remaining=1 retry-after=""
	// 200 remaining=0 retry-after=""
	// 429 remaining=0 retry-after="30"
}
