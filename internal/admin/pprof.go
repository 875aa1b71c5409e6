package admin

import (
	"net/http"
	"net/http/pprof"
)

// routePprof serves Go's profiles under /debug/pprof/ when on (--pprof),
// else answers 404 saying how to turn them on. They sit behind the token
// and the Host and Origin checks like every route. /debug/pprof/cmdline is
// never served: the command line can hold a secret (--redis-password).
func (s *server) routePprof(on bool) {
	s.mux.Handle("/debug/pprof/cmdline", s.serve(func(w http.ResponseWriter, r *http.Request) error {
		return notFound("/debug/pprof/cmdline is never served, --pprof or not: the command line can hold secrets")
	}))
	if !on {
		s.mux.Handle("/debug/pprof/", s.serve(func(w http.ResponseWriter, r *http.Request) error {
			return notFound("%s: profiling is off; start sluice with --pprof (SLUICE_PPROF=true) to serve /debug/pprof/", r.URL.Path)
		}))
		return
	}
	s.mux.HandleFunc("/debug/pprof/", pprof.Index) // the profiles by name: heap, goroutine, allocs, block, mutex, threadcreate
	s.mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	s.mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	s.mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}
