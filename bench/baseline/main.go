// Command baseline is the HTTP ceiling sluice's decision API is compared
// with (bench/http.sh): a bare net/http server whose POST /ratelimit/check
// decodes the same JSON request with encoding/json and answers a fixed
// decision of the same size as sluice's, encoded with encoding/json, and
// decides nothing. What sluice's check endpoint does beyond this is the cost
// of rate limiting.
package main

import (
	"encoding/json"
	"flag"
	"io"
	"log"
	"net/http"
	"time"
)

// checkRequest has the six fields of sluice's check request (docs/api.md).
type checkRequest struct {
	User     string `json:"user"`
	APIKey   string `json:"api_key"`
	IP       string `json:"ip"`
	Plan     string `json:"plan"`
	Endpoint string `json:"endpoint"`
	Cost     int64  `json:"cost"`
}

// checkResponse is sluice's answer, with fixed values.
type checkResponse struct {
	Allowed      bool   `json:"allowed"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMS int64  `json:"reset_after_ms"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	Rule         string `json:"rule"`
	Client       string `json:"client"`
}

var answer = checkResponse{Allowed: true, Limit: 100, Remaining: 42, ResetAfterMS: 2400,
	Rule: "free-per-user", Client: "user:u123456"}

func check(w http.ResponseWriter, r *http.Request) {
	var req checkRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&req); err != nil {
		http.Error(w, `{"error":"invalid_request"}`, http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(answer)
}

func main() {
	listen := flag.String("listen", ":8090", "address to listen on")
	flag.Parse()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /ratelimit/check", check)
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	log.Printf("baseline: listening on %s", *listen)
	log.Fatal(srv.ListenAndServe())
}
