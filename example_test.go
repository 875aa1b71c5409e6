package sluice_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/sluicehq/sluice"
)

// A Go service limits its handlers with the rules of a file: 2 calls a
// minute per client address on /api. Saving an edit of the file puts it in
// force within a second, without a restart.
func Example() {
	dir, err := os.MkdirTemp("", "sluice-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "rules.yaml")
	err = os.WriteFile(path, []byte(`
rules:
  - id: api-per-ip
    match: {endpoint: "* /api/*"}
    by: ip
    limit: 2
    window: 1m
`), 0o644)
	if err != nil {
		log.Fatal(err)
	}

	lim, err := sluice.New(context.Background(), sluice.Options{RulesFile: path})
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close()
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "orders")
	})
	handler := lim.Middleware(api) // in a service: http.ListenAndServe(":8080", handler)

	for range 3 {
		r := httptest.NewRequest("GET", "/api/orders", nil)
		r.RemoteAddr = "203.0.113.7:41000"
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		fmt.Printf("%d remaining=%s\n", w.Code, w.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// 200 remaining=1
	// 200 remaining=0
	// 429 remaining=0
}
