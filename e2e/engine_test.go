package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestGatewayEngines runs the gateway binary with each --http-engine and
// checks the same answers from both: a limit holds, sequentially and under
// concurrent calls, and forwarded calls reach the upstream as sent
// (method, path, query, headers, body, the peer in X-Forwarded-For,
// X-Forwarded-Proto) and
// come back as it answered (status, headers, body), with the quota
// headers; a denied call is the JSON 429 and never reaches the upstream.
func TestGatewayEngines(t *testing.T) {
	rulesPath := writeRules(t, `
rules:
  - {id: orders-per-ip, match: {endpoint: "GET /api/orders"}, by: ip, limit: 3, window: 1h}
  - {id: burst-per-ip, match: {endpoint: "GET /api/burst"}, by: ip, limit: 5, window: 1h}
`)
	type seen struct {
		Method, URI, Echo, XFF, XFProto, Body string
	}
	up := newCountingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s := seen{r.Method, r.RequestURI, r.Header.Get("X-Echo"), r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Proto"), string(b)}
		w.Header().Set("X-Upstream", "yes")
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusCreated)
		}
		json.NewEncoder(w).Encode(s)
	})

	for _, engine := range []string{"std", "fast"} {
		t.Run(engine, func(t *testing.T) {
			gw := startGateway(t, rulesPath, up.URL, "--http-engine", engine)
			t.Cleanup(http.DefaultClient.CloseIdleConnections) // before the gateway stops: no drain to wait for
			up.calls.Store(0)

			for i := range 3 {
				c := gwDo(t, "GET", gw.url+"/api/orders?page="+fmt.Sprint(i)+"&q=a%20b", map[string]string{"X-Echo": "hi"})
				want := seen{"GET", "/api/orders?page=" + fmt.Sprint(i) + "&q=a%20b", "hi", "127.0.0.1", "http", ""}
				var got seen
				if err := json.Unmarshal([]byte(c.body), &got); err != nil || c.status != 200 || got != want ||
					c.header.Get("X-Upstream") != "yes" || c.header.Get("X-RateLimit-Remaining") != fmt.Sprint(2-i) {
					t.Fatalf("call %d: %d %q X-Upstream %q remaining %q; want 200, the upstream's answer to %+v, remaining %d",
						i+1, c.status, c.body, c.header.Get("X-Upstream"), c.header.Get("X-RateLimit-Remaining"), want, 2-i)
				}
			}
			denied := gwDo(t, "GET", gw.url+"/api/orders", nil)
			var body struct {
				Error string `json:"error"`
			}
			if json.Unmarshal([]byte(denied.body), &body); denied.status != 429 || body.Error != "rate_limit_exceeded" ||
				denied.header.Get("Retry-After") == "" || denied.header.Get("X-Upstream") != "" {
				t.Fatalf("4th call: %d %q Retry-After %q, want the gateway's 429 rate_limit_exceeded", denied.status, denied.body, denied.header.Get("Retry-After"))
			}
			if n := up.calls.Load(); n != 3 {
				t.Errorf("upstream saw %d calls, want the 3 allowed", n)
			}

			// A call no rule limits, with a body: forwarded as sent, the
			// upstream's status and headers back.
			req, _ := http.NewRequest("POST", gw.url+"/api/orders/new", strings.NewReader(`{"item":42}`))
			req.Header.Set("X-Echo", "post")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var got seen
			want := seen{"POST", "/api/orders/new", "post", "127.0.0.1", "http", `{"item":42}`}
			if err := json.Unmarshal(b, &got); err != nil || resp.StatusCode != 201 || got != want || resp.Header.Get("X-Upstream") != "yes" {
				t.Errorf("POST: %d %q, want 201 and the upstream's answer to %+v", resp.StatusCode, b, want)
			}

			// Concurrent calls: exactly the limit passes.
			up.calls.Store(0)
			var wg sync.WaitGroup
			codes := make([]int, 20)
			for i := range codes {
				wg.Go(func() {
					resp, err := http.Get(gw.url + "/api/burst")
					if err != nil {
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					codes[i] = resp.StatusCode
				})
			}
			wg.Wait()
			count := map[int]int{}
			for _, c := range codes {
				count[c]++
			}
			if count[200] != 5 || count[429] != 15 || up.calls.Load() != 5 {
				t.Errorf("20 concurrent calls to a limit of 5: statuses %v, upstream saw %d; want 5 × 200, 15 × 429, 5 upstream", count, up.calls.Load())
			}
		})
	}
}
