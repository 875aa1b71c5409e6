package admin

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/sluicehq/sluice/internal/jsonhttp"
)

// A web page in the operator's browser can send requests to the admin API
// on 127.0.0.1 — cross-origin as "simple" requests (POST as text/plain or a
// form), or, after re-pointing its own name at 127.0.0.1 (DNS rebinding),
// as its own origin, reading the answers. Three checks stop both, on every
// request before the token is looked at:
//
//   - Host must be the listen address's host, "localhost", an IP address
//     (which no DNS answer can re-point), or a name of Config.AllowedHosts.
//     A rebinding page's Host is its own name: refused.
//   - Origin, when present (browsers send it; curl and sluice do not), must
//     be the API's own (the scheme of the connection and the Host) or one of
//     Config.AllowedOrigins. "null" (a sandboxed page, a file) is refused.
//   - A body is accepted only as application/json: PUT and POST must say
//     so, and a DELETE with a body or a Content-Type too. A page cannot
//     send application/json cross-origin without the API's permission (a
//     CORS preflight, which it never gives).
//
// Refusals are 403 forbidden and 415 unsupported_media_type.

// Error codes of the browser defences.
const (
	CodeForbidden            = "forbidden"
	CodeUnsupportedMediaType = "unsupported_media_type"
)

// guard holds the names and origins the admin API accepts besides its own.
type guard struct {
	listenHost string          // the host of Config.Listen, normalized; "" when none or an IP
	hosts      map[string]bool // normalized Config.AllowedHosts
	origins    map[string]bool // normalized Config.AllowedOrigins
}

func newGuard(cfg Config) *guard {
	g := &guard{hosts: map[string]bool{}, origins: map[string]bool{}}
	if cfg.Listen != "" {
		g.listenHost = hostOf(cfg.Listen)
	}
	for _, h := range cfg.AllowedHosts {
		if h = hostOf(strings.TrimSpace(h)); h != "" {
			g.hosts[h] = true
		}
	}
	for _, o := range cfg.AllowedOrigins {
		if n, ok := normOrigin(strings.TrimSpace(o)); ok {
			g.origins[n] = true
		}
	}
	return g
}

// Guard wraps h, a handler served beside the admin API on its listener
// (the gateway's /healthz and /readyz), with the admin API's Host and
// Origin checks.
func Guard(cfg Config, h http.Handler) http.Handler {
	g := newGuard(cfg)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ae := g.check(r); ae != nil {
			writeAPIError(w, ae)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func forbidden(format string, args ...any) *jsonhttp.APIError {
	return &jsonhttp.APIError{Status: http.StatusForbidden, Code: CodeForbidden, Message: fmt.Sprintf(format, args...)}
}

// check returns the refusal of a request whose Host or Origin is not one
// the admin API accepts, or nil.
func (g *guard) check(r *http.Request) *jsonhttp.APIError {
	if !g.hostOK(r.Host) {
		return forbidden("Host: %q is not a name of this admin API, which answers to its listen address, localhost "+
			"and IP addresses (a page whose name points here is refused); to reach it by this name, add --admin-allowed-host %s",
			r.Host, hostOf(r.Host))
	}
	origins := r.Header.Values("Origin")
	if len(origins) == 0 {
		return nil
	}
	if len(origins) == 1 {
		o, ok := normOrigin(origins[0])
		if ok && g.origins[o] {
			return nil
		}
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		if own, ownOK := normOrigin(scheme + "://" + r.Host); ok && ownOK && o == own {
			return nil
		}
	}
	return forbidden("Origin: %q may not use the admin API: a web page may call it only from the API's own origin "+
		"or one listed with --admin-allowed-origin; tools (curl, sluice rules) send no Origin", strings.Join(origins, ", "))
}

func (g *guard) hostOK(hostport string) bool {
	if hostport == "" {
		return true // HTTP/1.0 without Host: not a browser
	}
	h := hostOf(hostport)
	if h == "localhost" || (h != "" && h == g.listenHost) || g.hosts[h] {
		return true
	}
	_, err := netip.ParseAddr(h)
	return err == nil
}

// hostOf returns the host of a "host:port" or "host", lower case, without
// IPv6 brackets or a final dot.
func hostOf(hostport string) string {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	} else {
		h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	}
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// normOrigin returns an origin as scheme://host[:port] in lower case
// without the scheme's default port, and whether it is one: http or https,
// a host, nothing after it (a final "/" aside).
func normOrigin(o string) (string, bool) {
	u, err := url.Parse(o)
	if err != nil || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/") {
		return "", false
	}
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	switch {
	case scheme == "http" && port == "80", scheme == "https" && port == "443":
		port = ""
	case scheme != "http" && scheme != "https":
		return "", false
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if host == "" {
		return "", false
	}
	if port != "" {
		return scheme + "://" + net.JoinHostPort(host, port), true
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return scheme + "://" + host, true
}

// CheckAllowed returns an error naming the flag when an entry of
// --admin-allowed-host (hosts) or --admin-allowed-origin (origins) is not
// one: blank, a wildcard, a URL where a name is wanted, or an origin that
// is not scheme://host[:port].
func CheckAllowed(hosts, origins []string) error {
	for _, h := range hosts {
		t := strings.TrimSpace(h)
		switch {
		case t == "":
			return fmt.Errorf("admin: --admin-allowed-host (SLUICE_ADMIN_ALLOWED_HOST): an entry is blank; give host names separated by commas, e.g. gw-01,sluice-admin.internal")
		case strings.ContainsAny(t, "*/@ \t"):
			return fmt.Errorf("admin: --admin-allowed-host (SLUICE_ADMIN_ALLOWED_HOST): %q is not a host name; give a name as the browser or curl sends it in Host, e.g. sluice-admin.internal (no scheme, path or wildcard)", t)
		}
	}
	for _, o := range origins {
		t := strings.TrimSpace(o)
		if t == "" {
			return fmt.Errorf("admin: --admin-allowed-origin (SLUICE_ADMIN_ALLOWED_ORIGIN): an entry is blank; give origins separated by commas, e.g. https://console.internal")
		}
		if _, ok := normOrigin(t); !ok || strings.Contains(t, "*") {
			return fmt.Errorf("admin: --admin-allowed-origin (SLUICE_ADMIN_ALLOWED_ORIGIN): %q is not an origin; want scheme://host[:port] with scheme http or https, e.g. https://console.internal", t)
		}
	}
	return nil
}

// checkBody returns the refusal of a write whose body is not JSON: PUT and
// POST must send Content-Type: application/json (parameters allowed, a
// charset only utf-8); any other method only when it sends a body or a
// Content-Type.
func checkBody(r *http.Request) *jsonhttp.APIError {
	ct := r.Header.Get("Content-Type")
	if r.Method != http.MethodPut && r.Method != http.MethodPost && ct == "" && r.ContentLength == 0 {
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err == nil && mt == "application/json" {
		if cs, ok := params["charset"]; !ok || strings.EqualFold(cs, "utf-8") {
			return nil
		}
	}
	return &jsonhttp.APIError{Status: http.StatusUnsupportedMediaType, Code: CodeUnsupportedMediaType,
		Message: fmt.Sprintf("Content-Type: %q is not accepted; send the body as application/json (curl: -H 'Content-Type: application/json')", ct)}
}
