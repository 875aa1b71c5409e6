package cli

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/testkit/listentest"
	"github.com/sluicehq/sluice/internal/testkit/xdstest"
)

// envoyLimit is an envoyproxy/ratelimit configuration file: domain, one
// descriptor key k per value, n calls a minute.
func envoyLimit(domain string, n int) string {
	return "domain: " + domain + "\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: " +
		strconv.Itoa(n) + "\n"
}

// kubeletSwap lays out dir as a Kubernetes ConfigMap mount and swaps it
// to files as the kubelet does: a new timestamped directory, ..data
// replaced by a rename, the old directory removed.
func kubeletSwap(t *testing.T, dir, stamp string, files map[string]string) {
	t.Helper()
	ts := filepath.Join(dir, "..2026_12_07_"+stamp)
	if err := os.MkdirAll(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(ts, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	if err := os.Symlink(filepath.Base(ts), filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		if _, err := os.Lstat(filepath.Join(dir, name)); err != nil {
			if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if old != "" {
		os.RemoveAll(filepath.Join(dir, old))
	}
}

func setenv(t *testing.T, env map[string]string) {
	for k, v := range env {
		t.Setenv(k, v)
	}
}

// TestServeEnvoyRuntimeDirectory: `sluice serve` started with the
// environment of an envoyproxy/ratelimit deployment (Envoy Gateway's file
// settings: RUNTIME_ROOT, RUNTIME_SUBDIRECTORY, RUNTIME_IGNOREDOTFILES,
// RUNTIME_WATCH_ROOT=false, PORT, GRPC_PORT, DEBUG_PORT) serves its
// ConfigMap-mounted configuration; a ConfigMap update is in force without
// a restart, a broken one keeps the last good configuration (and is
// counted), and /healthcheck and /json answer as envoyproxy/ratelimit's.
func TestServeEnvoyRuntimeDirectory(t *testing.T) {
	root := t.TempDir()
	conf := filepath.Join(root, "ratelimit", "config")
	kubeletSwap(t, conf, "01", map[string]string{"gw.yaml": envoyLimit("default/eg/https", 2)})
	port := func() string { return strconv.Itoa(listentest.FreePort(t)) }
	httpPort, grpcPort, debugPort := port(), port(), port()
	setenv(t, map[string]string{
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true", "RUNTIME_WATCH_ROOT": "false",
		"HOST": "127.0.0.1", "PORT": httpPort, "GRPC_HOST": "127.0.0.1", "GRPC_PORT": grpcPort, "DEBUG_PORT": debugPort,
		"LOG_LEVEL": "info", "USE_STATSD": "false", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true",
		"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_REMAINING_HEADER": "X-Calls-Left",
	})
	s := start(t, "serve", "--rules-poll", "50ms")
	base := "http://127.0.0.1:" + httpPort
	s.waitUp(t, http.DefaultClient, base+"/healthcheck")
	if r, err := http.Get(base + "/healthcheck"); err != nil || r.StatusCode != 200 || body(r) != "OK" {
		t.Fatalf("GET /healthcheck = %v, %v; want 200 OK", r, err)
	}
	if r, err := http.Get("http://127.0.0.1:" + debugPort + "/rules"); err != nil || r.StatusCode != 200 {
		t.Errorf("the admin API on DEBUG_PORT: %v, %v", r, err)
	}

	cc, err := grpc.NewClient("passthrough:///127.0.0.1:"+grpcPort, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	rls := rlsv3.NewRateLimitServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ask := func(value string) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "default/eg/https", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: value}}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp := ask("a")
		if got := resp.OverallCode; got != want {
			t.Fatalf("call %d under the first ConfigMap = %v, want %v", i+1, got, want)
		}
		left := ""
		for _, h := range resp.ResponseHeadersToAdd {
			if h.GetKey() == "X-Calls-Left" {
				left = h.GetValue()
			}
		}
		if want := strconv.Itoa(max(1-i, 0)); left != want {
			t.Errorf("call %d: LIMIT_REMAINING_HEADER X-Calls-Left = %q, want %q (headers %v)", i+1, left, want, resp.ResponseHeadersToAdd)
		}
	}

	// The ConfigMap is updated: 5 a minute, in force without a restart.
	kubeletSwap(t, conf, "02", map[string]string{"gw.yaml": envoyLimit("default/eg/https", 5)})
	waitFor(t, "the ConfigMap update in force", func() bool { return ask("b").Statuses[0].GetCurrentLimit().GetRequestsPerUnit() == 5 })

	// A broken update keeps it, and is counted.
	kubeletSwap(t, conf, "03", map[string]string{"gw.yaml": "domain: default/eg/https\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n"})
	waitFor(t, "the broken update counted", func() bool {
		r, err := http.Get(base + "/metrics")
		return err == nil && strings.Contains(body(r), "sluice_rules_load_failing 1")
	})
	if got := ask("c").Statuses[0].GetCurrentLimit().GetRequestsPerUnit(); got != 5 {
		t.Errorf("limit after a broken update = %d, want 5, the last good", got)
	}

	// /json: envoyproxy/ratelimit's JSON form, 429 when over the limit.
	jsonCall := `{"domain": "default/eg/https", "descriptors": [{"entries": [{"key": "k", "value": "j"}]}]}`
	for i := range 6 {
		r, err := http.Post(base+"/json", "application/json", strings.NewReader(jsonCall))
		if err != nil {
			t.Fatal(err)
		}
		b := body(r)
		want, code := 200, `"overallCode":"OK"`
		if i == 5 {
			want, code = 429, `"overallCode":"OVER_LIMIT"`
		}
		if r.StatusCode != want || !strings.Contains(b, code) {
			t.Errorf("POST /json call %d = %d %s, want %d with %s", i+1, r.StatusCode, b, want, code)
		}
	}
	if r, err := http.Post(base+"/json", "application/json", strings.NewReader(`{"domain": 5}`)); err != nil || r.StatusCode != 400 {
		t.Errorf("POST /json of a bad body = %v, %v; want 400", r, err)
	}

	// detailed_metric: the statistics count per value.
	kubeletSwap(t, conf, "04", map[string]string{"gw.yaml": "domain: default/eg/https\ndescriptors:\n  - key: k\n    detailed_metric: true\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"})
	waitFor(t, "detailed_metric counted per value", func() bool {
		ask("d")
		r, err := http.Get(base + "/metrics")
		return err == nil && strings.Contains(body(r), `sluice_envoy_total_hits_total{domain="default/eg/https",key="k_d"}`)
	})
}

func body(r *http.Response) string {
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return string(b)
}

// waitFor polls cond for up to 15 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("%s: not within 15 s", what)
}

// TestServeEnvoyEnvRefused: a setting sluice cannot honour stops serve at
// start, named, with why.
func TestServeEnvoyEnvRefused(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"BACKEND_TYPE": "memcache"}, `environment BACKEND_TYPE="memcache": not supported by sluice: redis only`},
		{map[string]string{"REDIS_URL": "10.0.0.1:26379", "REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "sentinel", "RUNTIME_SUBDIRECTORY": "rl"}, "REDIS_TYPE=SENTINEL: not supported by sluice"},
		{map[string]string{"REDIS_URL": "/var/run/nutcracker/ratelimit.sock", "RUNTIME_SUBDIRECTORY": "rl"}, "it dials Redis over TCP"},
		{map[string]string{"REDIS_URL": "redis:6379", "REDIS_SOCKET_TYPE": "tcp"}, "RUNTIME_SUBDIRECTORY is empty, and envoyproxy/ratelimit then loads no configuration at all"},
		{map[string]string{"RESPONSE_DYNAMIC_METADATA": "true"}, "RESPONSE_DYNAMIC_METADATA"},
		{map[string]string{"GRPC_UDS": "/tmp/rl.sock"}, "GRPC_UDS"},
		{map[string]string{"SHADOW_MODE": "yes"}, `environment SHADOW_MODE="yes": want true or false`},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS"}, `environment CONFIG_TYPE="GRPC_XDS": want FILE or GRPC_XDS_SOTW`},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x"}, "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"},
		{map[string]string{"RUNTIME_ROOT": "/nonexistent", "RUNTIME_SUBDIRECTORY": "rl"}, "runtime directory /nonexistent/rl/config"},
		{map[string]string{"SLUICE_ENVOY_CHARGE_AFTER_RESPONSE": "ai"}, "--envoy-charge-after-response (SLUICE_ENVOY_CHARGE_AFTER_RESPONSE) applies to envoyproxy/ratelimit's configuration"},
		{map[string]string{"SLUICE_ENVOY_CHARGE_AFTER_RESPONSE": "ai:user,ai=x", "RUNTIME_SUBDIRECTORY": "rl"},
			`--envoy-charge-after-response (SLUICE_ENVOY_CHARGE_AFTER_RESPONSE) "ai=x": want domain, domain:key or domain:key=value; a value needs a key`},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			setenv(t, tt.env)
			args := []string{"serve", "--listen", listentest.FreeAddr(t), "--grpc-listen", "", "--admin-listen", listentest.FreeAddr(t)}
			if tt.env["RUNTIME_SUBDIRECTORY"] == "" && tt.env["CONFIG_TYPE"] == "" && tt.env["REDIS_URL"] == "" {
				args = append(args, "--rules", filepath.Join(t.TempDir(), "r.yaml"))
			}
			code, _, errOut := sluice(t, "", args...)
			if code == 0 || !strings.Contains(errOut, tt.want) {
				t.Errorf("serve with %v: exit %d, %q; want an error containing %q", tt.env, code, errOut, tt.want)
			}
		})
	}
}

// TestEnvoyVarsDocumented: docs/envoy.md's table has a row for every
// variable of envoyproxy/ratelimit's settings, saying what sluice does.
func TestEnvoyVarsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	word := map[envoyDisposition]string{envoyHonoured: "honoured", envoyRefused: "refused", envoyNotNeeded: "not needed"}
	for _, v := range envoyVars {
		row := "| `" + v.name + "` | " + word[v.what] + " | " + v.as + " |"
		if !strings.Contains(doc, row) {
			t.Errorf("docs/envoy.md lacks the row\n%s", row)
		}
	}
}

// TestServeEnvoyXDS: `sluice serve` with the environment Envoy Gateway
// gives envoyproxy/ratelimit (CONFIG_TYPE=GRPC_XDS_SOTW, its node id,
// FORCE_START_WITHOUT_INITIAL_CONFIG) takes RateLimitConfig resources
// shaped as Envoy Gateway generates them from a go-control-plane xDS
// server, and decides through the Envoy API by them: after a change, and
// across a restart of the xDS server, during which the last good
// configuration stays in force.
func TestServeEnvoyXDS(t *testing.T) {
	xds := xdstest.Start(t, "127.0.0.1:0")
	xds.Set(t, "envoy-ratelimit", 1, egLimit("default/eg/https", 2))
	grpcPort := strconv.Itoa(listentest.FreePort(t))
	setenv(t, map[string]string{
		"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": xds.Addr, "CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit",
		"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "50ms", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
		"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true", "RUNTIME_WATCH_ROOT": "false",
		"USE_STATSD": "false", "LOG_LEVEL": "info", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": grpcPort,
	})
	data := listentest.FreeAddr(t)
	s := start(t, "serve", "--listen", data, "--admin-listen", listentest.FreeAddr(t))
	s.waitUp(t, http.DefaultClient, "http://"+data+"/healthcheck")
	cc, err := grpc.NewClient("passthrough:///127.0.0.1:"+grpcPort, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	rls := rlsv3.NewRateLimitServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Envoy Gateway's descriptor for the route's rule, per client IP.
	ask := func(ip string) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "default/eg/https", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: egRoute, Value: egRoute}, {Key: "rule-0-match-0", Value: "rule-0-match-0"}, {Key: "remote_address", Value: ip}}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	waitFor(t, "the first configuration", func() bool { return ask("192.0.2.9").Statuses[0].GetCurrentLimit().GetRequestsPerUnit() == 2 })
	ask("192.0.2.1")
	ask("192.0.2.1")
	if got := ask("192.0.2.1").OverallCode; got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("third call of 192.0.2.1 = %v, want OVER_LIMIT", got)
	}
	if got := ask("192.0.2.2").OverallCode; got != rlsv3.RateLimitResponse_OK {
		t.Errorf("first call of 192.0.2.2 = %v, want OK: one bucket per client IP", got)
	}

	xds.Set(t, "envoy-ratelimit", 2, egLimit("default/eg/https", 5))
	waitFor(t, "the change", func() bool { return ask("192.0.2.3").Statuses[0].GetCurrentLimit().GetRequestsPerUnit() == 5 })

	addr := xds.Addr
	xds.Stop()
	time.Sleep(200 * time.Millisecond) // a few failed reconnections
	if got := ask("192.0.2.4").Statuses[0].GetCurrentLimit().GetRequestsPerUnit(); got != 5 {
		t.Errorf("limit with the xDS server down = %d, want 5, the last good", got)
	}
	xds2 := xdstest.Start(t, addr)
	xds2.Set(t, "envoy-ratelimit", 1, egLimit("default/eg/https", 8))
	waitFor(t, "the restarted server's configuration", func() bool { return ask("192.0.2.5").Statuses[0].GetCurrentLimit().GetRequestsPerUnit() == 8 })
}
