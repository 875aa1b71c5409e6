package cli

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// TestEngineFlagsMatchServe: a flag serve and gateway both have means the
// same in both — type, default and help — so that one configuration serves
// both; only the listeners (--listen, --admin-listen) differ. The commands
// are compared as a user sees them, so a flag either registers on its own
// (--admin-token is written out in both) is held to it too.
func TestEngineFlagsMatchServe(t *testing.T) {
	shared := pflag.NewFlagSet("engine", pflag.ContinueOnError)
	addEngineFlags(shared, &serveFlags{})
	serve, gw := newServeCmd().Flags(), newGatewayCmd().Flags()
	listeners := map[string]bool{"listen": true, "admin-listen": true}
	serve.VisitAll(func(f *pflag.Flag) {
		g := gw.Lookup(f.Name)
		if g == nil || listeners[f.Name] {
			return
		}
		if g.DefValue != f.DefValue || g.Usage != f.Usage || g.Value.Type() != f.Value.Type() {
			t.Errorf("gateway --%s = %s %q (%q), want serve's %s %q (%q)", f.Name, g.Value.Type(), g.DefValue, g.Usage, f.Value.Type(), f.DefValue, f.Usage)
		}
	})
	// gateway has every shared flag.
	shared.VisitAll(func(f *pflag.Flag) {
		if gw.Lookup(f.Name) == nil {
			t.Errorf("gateway has no --%s: it does not register addEngineFlags", f.Name)
		}
	})
	// And every serve flag that is not serve's own is shared.
	serveOnly := map[string]bool{"listen": true, "admin-listen": true, "admin-token": true, "grpc-listen": true, "grpc-tls-cert": true, "grpc-tls-key": true, "grpc-tls-client-ca": true, "envoy-ratelimit-headers": true, "envoy-quota-headers": true, "envoy-charge-after-response": true, "data-token": true, "json-decoder": true, "help": true,
		"admin-allowed-host": true, "admin-allowed-origin": true, "pprof": true} // the admin listener's: adminflags.go; the Envoy API's: observe.go; the check API's: serve.go
	serve.VisitAll(func(f *pflag.Flag) {
		if !serveOnly[f.Name] && shared.Lookup(f.Name) == nil {
			t.Errorf("serve's --%s is missing from addEngineFlags: sluice gateway lacks it", f.Name)
		}
	})
}

func TestGatewayFlagErrors(t *testing.T) {
	dir := t.TempDir()
	badKeys := filepath.Join(dir, "keys.pem")
	if err := os.WriteFile(badKeys, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	rules := filepath.Join(dir, "rules.yaml")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no upstream", nil, "--upstream is required"},
		{"bad upstream", []string{"--upstream", "ftp://x"}, "want an http:// or https:// URL"},
		{"bad trusted proxies", []string{"--upstream", "http://127.0.0.1:1", "--trusted-proxies", "10.0.0.0/99"}, "--trusted-proxies"},
		{"bad forwarded header", []string{"--upstream", "http://127.0.0.1:1", "--forwarded-header", "X-Real-IP"}, "want X-Forwarded-For or Forwarded"},
		{"bad api key header", []string{"--upstream", "http://127.0.0.1:1", "--api-key-header", "X Key"}, "not a header name"},
		{"bad key file", []string{"--upstream", "http://127.0.0.1:1", "--jwt-public-keys", badKeys}, "--jwt-public-keys"},
		{"missing key file", []string{"--upstream", "http://127.0.0.1:1", "--jwt-public-keys", filepath.Join(dir, "none")}, "no such file"},
		{"public admin without token", []string{"--upstream", "http://127.0.0.1:1", "--admin-listen", "0.0.0.0:0"}, "admin"},
		{"no memory ceiling", []string{"--upstream", "http://127.0.0.1:1", "--memory-max-buckets", "0"}, "--memory-max-buckets must be ≥ 1"},
		{"memory ceiling below the shards", []string{"--upstream", "http://127.0.0.1:1", "--memory-max-buckets", "10"}, "--memory-max-buckets: memory: invalid config: max buckets = 10, want at least one per shard"},
		{"admin TLS without admin listener", []string{"--upstream", "http://127.0.0.1:1", "--admin-tls-cert", "c.pem", "--admin-tls-key", "k.pem"}, "need --admin-listen"},
		{"batch wait too long", []string{"--upstream", "http://127.0.0.1:1", "--redis-batch-wait", "11ms"}, "--redis-batch-wait 11ms: want 0 (a call goes at once) up to 10ms"},
		{"negative batch wait", []string{"--upstream", "http://127.0.0.1:1", "--redis-batch-wait", "-1ms"}, "--redis-batch-wait -1ms: want 0"},
		{"no body rate", []string{"--upstream", "http://127.0.0.1:1", "--min-body-rate", "0"}, "--min-body-rate must be at least 1"},
		{"unknown engine", []string{"--upstream", "http://127.0.0.1:1", "--http-engine", "nginx"}, `--http-engine (SLUICE_HTTP_ENGINE) "nginx": want fast or std`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"gateway", "--listen", "127.0.0.1:0", "--rules", rules}, tt.args...)
			code, _, stderr := sluice(t, "", args...)
			if code != 1 || !strings.Contains(stderr, tt.want) {
				t.Errorf("sluice %v = %d, %q; want 1 and an error containing %q", args, code, stderr, tt.want)
			}
		})
	}
}

// TestGatewayAccessLog: --access-log writes one line per call with its
// status and quota headers, and leaves the writer's Hijack reachable (a
// WebSocket upgrade through the proxy hijacks the connection).
func TestGatewayAccessLog(t *testing.T) {
	var buf lockedBuffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	h := accessLog(log, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/upgrade" {
			w.WriteHeader(http.StatusSwitchingProtocols)
			c, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("Hijack through the access log: %v", err)
				return
			}
			c.Close()
			return
		}
		w.Header().Set("RateLimit-Policy", `"per-ip";q=1;w=60`)
		w.Header().Set("X-RateLimit-Remaining", "0")
		w.Header().Set("Retry-After", "60")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/api/orders")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	http.Get(srv.URL + "/upgrade") //nolint:errcheck // the connection is cut on purpose
	// The upgrade's line is written after the hijacked connection closed,
	// so possibly after the client saw it close.
	for deadline := time.Now().Add(5 * time.Second); bytes.Count(buf.Bytes(), []byte("\n")) < 2 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}

	var lines []map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 2 {
		t.Fatalf("logged %d lines, want 2: %s", len(lines), buf.String())
	}
	first := lines[0]
	for k, want := range map[string]any{"msg": "request", "method": "GET", "path": "/api/orders", "status": 429.0,
		"policy": `"per-ip";q=1;w=60`, "remaining": "0", "retry_after": "60"} {
		if first[k] != want {
			t.Errorf("%s = %v, want %v", k, first[k], want)
		}
	}
	if lines[1]["status"] != 101.0 || lines[1]["path"] != "/upgrade" {
		t.Errorf("upgrade line = %v, want status 101, path /upgrade", lines[1])
	}
}

// lockedBuffer is a bytes.Buffer safe for a logger and a reader at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// Bytes returns a copy of what was written.
func (b *lockedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.b.Bytes())
}

func (b *lockedBuffer) String() string { return string(b.Bytes()) }
