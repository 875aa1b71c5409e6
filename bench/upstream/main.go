// Command upstream is the backend of bench/gateway.sh: a bare net/http
// server answering every call with a small fixed body, so that what the
// gateway adds in front of it is what is measured.
package main

import (
	"flag"
	"io"
	"log"
	"net/http"
	"strconv"
	"time"
)

// body is the answer to every call: a small JSON document.
const body = `{"id":42,"status":"shipped","items":3,"total":"59.90"}` + "\n"

func main() {
	listen := flag.String("listen", "127.0.0.1:18100", "address to listen on")
	flag.Parse()
	length := strconv.Itoa(len(body))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) //nolint:errcheck // a request body is read and dropped
		hd := w.Header()
		hd["Content-Type"] = []string{"application/json"}
		hd["Content-Length"] = []string{length}
		io.WriteString(w, body) //nolint:errcheck
	})
	srv := &http.Server{Addr: *listen, Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	log.Printf("upstream: listening on %s", *listen)
	log.Fatal(srv.ListenAndServe())
}
