package server

import (
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/jsonhttp"
)

// CodeMethodNotAllowed is the error code of a 405: the path exists, not
// with that method.
const CodeMethodNotAllowed = "method_not_allowed"

// ReadyHandler answers GET /readyz with ready's verdict exactly as the
// data plane's /readyz does (one line, "status" first, 503 when not
// ready), for listeners that do not serve the decision API (the gateway's
// admin listener).
func ReadyHandler(ready func() (bool, map[string]any)) http.Handler {
	s := &Server{cfg: Config{Ready: ready}.withDefaults()}
	return s.handler(s.readyz)
}

// methodNotAllowed answers a known path asked with another method: 405 in
// the JSON error shape, with Allow.
func methodNotAllowed(allow ...string) handlerFunc {
	allowed := strings.Join(allow, ", ")
	return func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Allow", allowed)
		return &jsonhttp.APIError{Status: http.StatusMethodNotAllowed, Code: CodeMethodNotAllowed,
			Message: r.Method + " " + r.URL.Path + ": method not allowed, want " + allowed}
	}
}
