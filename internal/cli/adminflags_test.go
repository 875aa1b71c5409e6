package cli

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/sluicehq/sluice/internal/testkit/listentest"
	"github.com/sluicehq/sluice/rules"
)

// sluiceFor runs the sluice command like sluice, but gives up after d (a
// command that should have refused to start and is serving instead).
func sluiceFor(t *testing.T, d time.Duration, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	root := NewRoot()
	var out, errOut strings.Builder
	root.SetOut(&out)
	root.SetErr(&errOut)
	code := run(ctx, root, args, &errOut)
	return code, errOut.String()
}

// TestSecretFlagsRefuseBlank is the blank-secret attack and its kin at
// the command line: every secret flag given blank or malformed — on the
// command line or in its environment variable — stops sluice at start
// with an error naming the flag. `--admin-token ' , '` on 0.0.0.0 once
// served the admin API to anyone.
func TestSecretFlagsRefuseBlank(t *testing.T) {
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	serve := []string{"serve", "--listen", "127.0.0.1:0", "--grpc-listen", "", "--admin-listen", "127.0.0.1:0", "--rules", rules}
	gateway := []string{"gateway", "--upstream", "http://127.0.0.1:1", "--listen", "127.0.0.1:0", "--rules", rules}
	with := func(base []string, extra ...string) []string { return append(append([]string{}, base...), extra...) }
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"serve, admin token blank", with(serve, "--admin-token", " "), nil, "--admin-token"},
		{"serve, admin token a comma", with(serve, "--admin-token", ","), nil, "--admin-token"},
		{"serve, admin token a spaced comma", with(serve, "--admin-token", " , "), nil, "--admin-token"},
		{"serve, blank token on every interface", with(serve, "--admin-listen", "0.0.0.0:0", "--admin-token", " , "), nil, "--admin-token"},
		{"serve, blank token entry", with(serve, "--admin-token", "alice:s1,,bob:s2"), nil, "entry 2 of 3 is blank"},
		{"serve, named token without secret", with(serve, "--admin-token", "alice:"), nil, "--admin-token"},
		{"serve, admin token in the environment", serve, map[string]string{"SLUICE_ADMIN_TOKEN": " , "}, "--admin-token (SLUICE_ADMIN_TOKEN)"},
		{"serve, redis password blank", with(serve, "--redis-password", " "), nil, "--redis-password"},
		{"serve, redis password with a newline", serve, map[string]string{"SLUICE_REDIS_PASSWORD": "pw\n"}, "--redis-password (SLUICE_REDIS_PASSWORD)"},
		{"gateway, admin token blank", with(gateway, "--admin-listen", "127.0.0.1:0", "--admin-token", ","), nil, "--admin-token"},
		{"gateway, admin token blank without the admin API", with(gateway, "--admin-token", " , "), nil, "--admin-token"},
		{"gateway, redis password blank", with(gateway, "--redis-password", "\t"), nil, "--redis-password"},
		{"gateway, JWT secret blank", with(gateway, "--jwt-hs256-secret", " "), nil, "--jwt-hs256-secret"},
		{"gateway, JWT secret with a newline", gateway, map[string]string{"SLUICE_JWT_HS256_SECRET": "s3cret\n"}, "--jwt-hs256-secret (SLUICE_JWT_HS256_SECRET)"},
		{"rules, admin token blank", []string{"rules", "list", "--admin", "http://127.0.0.1:1", "--admin-token", " "}, nil, "--admin-token"},
		{"rules, admin token a list", []string{"rules", "list", "--admin", "http://127.0.0.1:1", "--admin-token", "a,b"}, nil, "--admin-token"},
		{"serve, blank allowed host", with(serve, "--admin-allowed-host", " "), nil, "--admin-allowed-host"},
		{"serve, wildcard allowed origin", with(serve, "--admin-allowed-origin", "*"), nil, "--admin-allowed-origin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			code, stderr := sluiceFor(t, 3*time.Second, tt.args...)
			if code != 1 || !strings.Contains(stderr, tt.want) {
				t.Fatalf("sluice %q = exit %d, %q; want 1 and an error naming %q", tt.args, code, stderr, tt.want)
			}
			for _, secret := range []string{"s3cret", "alice:s1", "bob:s2", "pw\n"} {
				if strings.Contains(stderr, secret) {
					t.Errorf("the error shows the secret %q: %s", secret, stderr)
				}
			}
		})
	}
}

func TestCheckSecret(t *testing.T) {
	for _, tt := range []struct {
		in string
		ok bool
	}{
		{"", true}, {"s3cret", true}, {"pass word", true}, {"p@ss:w,rd", true},
		{" ", false}, {"\t\n", false}, {"s3cret\n", false}, {"s3\x00cret", false}, {" s3cret", false}, {"s3cret ", false},
	} {
		err := checkSecret("redis-password", tt.in)
		if (err == nil) != tt.ok {
			t.Errorf("checkSecret(%q) = %v, want ok %v", tt.in, err, tt.ok)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "--redis-password (SLUICE_REDIS_PASSWORD) ") {
			t.Errorf("checkSecret(%q) = %q, want it to name the flag and its variable", tt.in, err)
		}
	}
}

// TestSecretOnCommandLineWarns: a secret given as a flag is visible in ps;
// sluice says so and names the variable to use.
func TestSecretOnCommandLineWarns(t *testing.T) {
	_, stderr := sluiceFor(t, 3*time.Second, "rules", "list", "--admin", "http://127.0.0.1:1", "--admin-token", "s3cret")
	if !strings.Contains(stderr, "--admin-token on the command line") || !strings.Contains(stderr, "SLUICE_ADMIN_TOKEN") {
		t.Errorf("stderr %q: want a warning about --admin-token naming SLUICE_ADMIN_TOKEN", stderr)
	}
	t.Setenv("SLUICE_ADMIN_TOKEN", "s3cret")
	_, stderr = sluiceFor(t, 3*time.Second, "rules", "list", "--admin", "http://127.0.0.1:1")
	if strings.Contains(stderr, "warning") {
		t.Errorf("with SLUICE_ADMIN_TOKEN, stderr %q: want no warning", stderr)
	}
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	_, stderr = sluiceFor(t, 3*time.Second, "serve", "--rules", "postgres://sluice:pw@127.0.0.1:1/x", "--redis-password", " ", "--listen", "127.0.0.1:0", "--grpc-listen", "", "--admin-listen", "127.0.0.1:0", "--rules-snapshot", rules)
	if !strings.Contains(stderr, "--rules URL holds a password") || !strings.Contains(stderr, "--redis-password on the command line") {
		t.Errorf("stderr %q: want warnings about --rules and --redis-password", stderr)
	}
}

// TestAdminFlagsShared: serve and gateway take the admin listener's flags
// with the same defaults and help.
func TestAdminFlagsShared(t *testing.T) {
	want := pflag.NewFlagSet("admin", pflag.ContinueOnError)
	addAdminGuardFlags(want, &adminGuardFlags{})
	for name, fs := range map[string]*pflag.FlagSet{"serve": newServeCmd().Flags(), "gateway": newGatewayCmd().Flags()} {
		want.VisitAll(func(f *pflag.Flag) {
			if g := fs.Lookup(f.Name); g == nil || g.Usage != f.Usage || g.DefValue != f.DefValue {
				t.Errorf("%s --%s differs from addAdminGuardFlags's", name, f.Name)
			}
		})
	}
}

// get sends a GET with the given Host and headers (key, value, ...) and
// returns the status and body.
func get(t *testing.T, url, host string, kv ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Set(kv[i], kv[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// startCmd runs sluice with args, logging errors only, until the test
// ends, and waits until url answers.
func startCmd(t *testing.T, url string, args ...string) {
	t.Helper()
	start(t, append(args, "--log-level", "error")...).waitUp(t, http.DefaultClient, url)
}

// TestServeAdminListenerGuarded: `sluice serve` wires the flags to its
// admin listener: a rebinding Host is refused unless listed, profiles
// are off without --pprof, and the command line is never served.
func TestServeAdminListenerGuarded(t *testing.T) {
	dir := t.TempDir()
	adminAddr := listentest.FreeAddr(t)
	base := "http://" + adminAddr
	startCmd(t, base+"/rules", "serve", "--listen", listentest.FreeAddr(t), "--grpc-listen", "", "--admin-listen", adminAddr,
		"--rules", filepath.Join(dir, "rules.yaml"), "--admin-allowed-host", "sluice-admin.internal")
	for _, tt := range []struct {
		path, host string
		want       int
	}{
		{"/rules", "", 200},
		{"/rules", "rebind.evil.example", 403},
		{"/clients", "rebind.evil.example:" + strings.Split(adminAddr, ":")[1], 403},
		{"/rules", "sluice-admin.internal", 200},
		{"/debug/pprof/heap", "", 404},
		{"/debug/pprof/cmdline", "", 404},
	} {
		if code, body := get(t, base+tt.path, tt.host); code != tt.want {
			t.Errorf("GET %s Host %q: %d %s, want %d", tt.path, tt.host, code, body, tt.want)
		}
	}

	// The attacks over the wire: the rule stays.
	send := func(method, path, host, ctype, origin, body string) int {
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if host != "" {
			req.Host = host
		}
		req.Header.Set("Content-Type", ctype)
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := send("PUT", "/rules/keep", "", "application/json", "", `{"limit": 5, "window": "1m"}`); code != 201 {
		t.Fatalf("PUT /rules/keep: %d, want 201", code)
	}
	if code := send("POST", "/apply", "", "text/plain", "https://evil.example", `{"rules":[]}`); code != 403 {
		t.Errorf("POST /apply text/plain from evil.example: %d, want 403", code)
	}
	if code := send("PUT", "/rules/pwned", "rebind.evil.example", "application/json", "", `{"limit": 5, "window": "1m"}`); code != 403 {
		t.Errorf("PUT /rules/pwned from a rebound name: %d, want 403", code)
	}
	if code, body := get(t, base+"/rules", ""); code != 200 || !strings.Contains(body, `"keep"`) || strings.Contains(body, "pwned") {
		t.Errorf("GET /rules after the attacks: %d %s, want rule keep only", code, body)
	}

	adminAddr = listentest.FreeAddr(t)
	base = "http://" + adminAddr
	startCmd(t, base+"/rules", "serve", "--listen", listentest.FreeAddr(t), "--grpc-listen", "", "--admin-listen", adminAddr,
		"--rules", filepath.Join(dir, "rules2.yaml"), "--pprof", "--redis-password", "hunter2-secret")
	if code, body := get(t, base+"/debug/pprof/heap?debug=1", ""); code != 200 || !strings.Contains(body, "heap profile") {
		t.Errorf("with --pprof, GET /debug/pprof/heap: %d %.100s, want 200 and a heap profile", code, body)
	}
	if code, body := get(t, base+"/debug/pprof/cmdline", ""); code != 404 || strings.Contains(body, "hunter2") {
		t.Errorf("with --pprof, GET /debug/pprof/cmdline: %d %s, want 404 without the command line", code, body)
	}
	if code, _ := get(t, base+"/debug/pprof/heap", "rebind.evil.example"); code != 403 {
		t.Errorf("with --pprof, GET /debug/pprof/heap from a rebound name: %d, want 403", code)
	}
}

// TestGatewayAdminListenerGuarded: the gateway's admin listener, /healthz
// and /readyz included, refuses a rebinding Host.
func TestGatewayAdminListenerGuarded(t *testing.T) {
	adminAddr := listentest.FreeAddr(t)
	base := "http://" + adminAddr
	startCmd(t, base+"/healthz", "gateway", "--upstream", "http://127.0.0.1:1", "--listen", listentest.FreeAddr(t),
		"--admin-listen", adminAddr, "--rules", filepath.Join(t.TempDir(), "rules.yaml"))
	for _, p := range []string{"/healthz", "/readyz", "/rules", "/clients"} {
		if code, body := get(t, base+p, "rebind.evil.example"); code != 403 {
			t.Errorf("GET %s from a rebound name: %d %s, want 403", p, code, body)
		}
		if code, body := get(t, base+p, ""); code != 200 {
			t.Errorf("GET %s: %d %s, want 200", p, code, body)
		}
	}
	if code, body := get(t, base+"/rules", "", "Origin", "https://evil.example"); code != 403 {
		t.Errorf("GET /rules from evil.example: %d %s, want 403", code, body)
	}
}

// TestClientPassesTheGuard: every admin call of the client package (what
// sluice rules is built on) is accepted by the guarded admin API: its
// bodies are application/json and it sends no Origin.
func TestClientPassesTheGuard(t *testing.T) {
	s := startSluice(t, "alice:s3cret")
	c, err := (&adminFlags{url: s.admin, token: "alice:s3cret", timeout: 10 * time.Second}).client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	steps := []struct {
		name string
		err  func() error
	}{
		{"PutRule", func() error {
			_, err := c.PutRule(ctx, rules.Rule{ID: "r1", Limit: 5, Window: rules.Duration(time.Minute)})
			return err
		}},
		{"GetRule", func() error { _, err := c.GetRule(ctx, "r1"); return err }},
		{"ListRules", func() error { _, err := c.ListRules(ctx); return err }},
		{"PutClient", func() error { _, err := c.PutClient(ctx, "user:bob", rules.Client{Plan: "pro"}); return err }},
		{"GetClient", func() error { _, err := c.GetClient(ctx, "user:bob"); return err }},
		{"ListClients", func() error { _, err := c.ListClients(ctx); return err }},
		{"DeleteClient", func() error { return c.DeleteClient(ctx, "user:bob") }},
		{"Apply dry run", func() error { _, err := c.Apply(ctx, &rules.Set{}, true); return err }},
		{"DeleteRule", func() error { return c.DeleteRule(ctx, "r1") }},
		{"Apply", func() error {
			_, err := c.Apply(ctx, &rules.Set{Rules: []rules.Rule{{ID: "r2", Limit: 1, Window: rules.Duration(time.Second)}}}, false)
			return err
		}},
	}
	for _, st := range steps {
		if err := st.err(); err != nil {
			t.Errorf("%s: %v", st.name, err)
		}
	}
}
