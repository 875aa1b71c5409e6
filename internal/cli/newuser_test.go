package cli

import (
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bench/loadgen"
	"github.com/sluicehq/sluice/internal/testkit/listentest"
)

// TestRulesUnknownSubcommand: a mistyped or invented `sluice rules` verb
// fails (exit 1) with a suggestion, as the top level does, instead of
// printing the help and exiting 0; `show` points at `get`.
func TestRulesUnknownSubcommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rules", "lst"}, `"list"`},
		{[]string{"rules", "show", "free-per-user"}, `"get"`},
		{[]string{"rules", "remove", "x"}, `"delete"`},
		{[]string{"rules", "frobnicate"}, "list, get, apply, delete"},
	} {
		code, _, errOut := sluice(t, "", tc.args...)
		if code != 1 || !strings.Contains(errOut, "unknown command") || !strings.Contains(errOut, tc.want) {
			t.Errorf("sluice %s: exit %d, stderr %q; want 1, unknown command and %s", strings.Join(tc.args, " "), code, errOut, tc.want)
		}
	}
	code, out, _ := sluice(t, "", "rules", "--help")
	if code != 0 || strings.Contains(out, "show") {
		t.Errorf("sluice rules --help: exit %d, says \"show\", a verb there is not:\n%s", code, out)
	}
	code, out, _ = sluice(t, "", "rules")
	if code != 0 || !strings.Contains(out, "sluice rules get ID") {
		t.Errorf("sluice rules: exit %d, stdout %q; want 0 and the help", code, out)
	}
}

// TestRulesAdminHints: `sluice rules` pointed at the data plane (a 404
// from a server that is not the admin API) or at a port nobody listens on
// says what --admin should be, not a bare "404 page not found" or Go's
// dial error.
func TestRulesAdminHints(t *testing.T) {
	s := startSluice(t, "")
	code, _, errOut := sluice(t, "", "rules", "list", "--admin", s.data)
	if code != 1 || !strings.Contains(errOut, "not the admin API") || !strings.Contains(errOut, "--admin-listen") {
		t.Errorf("rules list against the data plane: exit %d, stderr %q; want a hint at the admin address", code, errOut)
	}
	dead := listentest.FreeAddr(t)
	code, _, errOut = sluice(t, "", "rules", "list", "--admin", "http://"+dead)
	if code != 1 || !strings.Contains(errOut, "nothing answers at http://"+dead) || !strings.Contains(errOut, "--admin-listen") {
		t.Errorf("rules list against a closed port: exit %d, stderr %q; want a hint at the admin address", code, errOut)
	}
	// A 404 of the admin API itself (an unknown rule) stays as it is.
	code, _, errOut = sluice(t, "", "rules", "get", "nope", "--admin", s.admin)
	if code != 1 || strings.Contains(errOut, "not the admin API") {
		t.Errorf("rules get of an unknown rule: exit %d, stderr %q; want the admin API's own 404", code, errOut)
	}
}

// TestRules401NamesTheSetting: every 401 says where the CLI's token comes
// from (--admin-token, SLUICE_ADMIN_TOKEN), with or without one sent.
func TestRules401NamesTheSetting(t *testing.T) {
	s := startSluice(t, "alice:s3cret")
	for _, args := range [][]string{
		{"rules", "list", "--admin", s.admin},
		{"rules", "list", "--admin", s.admin, "--admin-token", "alice:wrong"},
	} {
		code, _, errOut := sluice(t, "", args...)
		if code != 1 || !strings.Contains(errOut, "401") || !strings.Contains(errOut, "--admin-token") || !strings.Contains(errOut, "SLUICE_ADMIN_TOKEN") {
			t.Errorf("sluice %s: exit %d, stderr %q; want a 401 naming --admin-token and SLUICE_ADMIN_TOKEN", strings.Join(args, " "), code, errOut)
		}
	}
}

// TestPortClashesAllAtOnce: when several listen addresses are taken, one
// start reports them all, each with its flag, and the gRPC one says how to
// turn it off.
func TestPortClashesAllAtOnce(t *testing.T) {
	var taken []string
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		taken = append(taken, l.Addr().String())
	}
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	code, errOut := sluiceFor(t, 10*time.Second, "serve", "--listen", taken[0], "--admin-listen", taken[1],
		"--grpc-listen", taken[2], "--rules", rules)
	for _, want := range []string{"--listen " + taken[0], "--admin-listen " + taken[1], "--grpc-listen " + taken[2], `--grpc-listen ""`} {
		if code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("serve on three taken ports: exit %d, stderr %q; want 1 and %q", code, errOut, want)
		}
	}
	code, errOut = sluiceFor(t, 10*time.Second, "gateway", "--upstream", "http://127.0.0.1:1", "--listen", taken[0],
		"--admin-listen", taken[1], "--rules", rules)
	for _, want := range []string{"--listen " + taken[0], "--admin-listen " + taken[1]} {
		if code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("gateway on two taken ports: exit %d, stderr %q; want 1 and %q", code, errOut, want)
		}
	}
}

// TestGatewayUpstreamNeedsScheme: --upstream without a scheme is refused
// with the fix, not Go's URL parser's words.
func TestGatewayUpstreamNeedsScheme(t *testing.T) {
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	for _, up := range []string{"127.0.0.1:3000", "localhost:3000", "api.internal", "ftp://x:1"} {
		code, errOut := sluiceFor(t, 10*time.Second, "gateway", "--upstream", up, "--listen", "127.0.0.1:0", "--rules", rules)
		if code != 1 || !strings.Contains(errOut, "--upstream") || !strings.Contains(errOut, "http://") || strings.Contains(errOut, "first path segment") {
			t.Errorf("gateway --upstream %s: exit %d, stderr %q; want 1 and a message asking for http:// or https://", up, code, errOut)
		}
	}
}

// TestGatewayReadyzOneLine: the gateway's /readyz is one line, as serve's.
func TestGatewayReadyzOneLine(t *testing.T) {
	admin := listentest.FreeAddr(t)
	startCmd(t, "http://"+admin+"/healthz", "gateway", "--upstream", "http://127.0.0.1:1", "--listen", listentest.FreeAddr(t),
		"--admin-listen", admin, "--rules", filepath.Join(t.TempDir(), "rules.yaml"))
	code, body := get(t, "http://"+admin+"/readyz", "")
	if code != http.StatusOK || !strings.HasPrefix(body, `{"status":"ready",`) || strings.Count(body, "\n") != 1 {
		t.Errorf("gateway GET /readyz = %d %q, want 200 and one line starting {\"status\":\"ready\",", code, body)
	}
}

// TestRedisAddressChecked: a --redis that can never work is refused at
// start; redis:// and rediss:// URLs, what users paste, are taken.
func TestRedisAddressChecked(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []string
		tls     bool
		wantErr string
	}{
		{in: "127.0.0.1:6379", want: []string{"127.0.0.1:6379"}},
		{in: "redis://127.0.0.1:16479", want: []string{"127.0.0.1:16479"}},
		{in: "redis://127.0.0.1", want: []string{"127.0.0.1:6379"}},
		{in: "rediss://redis.internal:6380", want: []string{"redis.internal:6380"}, tls: true},
		{in: "redis://10.0.1.1:6379, redis://10.0.1.2:6379", want: []string{"10.0.1.1:6379", "10.0.1.2:6379"}},
		{in: "[::1]:6379", want: []string{"[::1]:6379"}},
		{in: "16479", wantErr: "host:port"},
		{in: ":6379", wantErr: "host:port"},
		{in: "127.0.0.1", wantErr: "host:port"},
		{in: "127.0.0.1:0", wantErr: "port"},
		{in: "127.0.0.1:99999", wantErr: "port"},
		{in: "http://127.0.0.1:6379", wantErr: "redis://"},
		{in: "redis://127.0.0.1:6379/2", wantErr: "database"},
		{in: "redis://user:pw@127.0.0.1:6379", wantErr: "SLUICE_REDIS_PASSWORD"},
		{in: "a:1,,b:2", wantErr: "empty"},
	} {
		got, tls, err := parseRedisAddrs(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "--redis") {
				t.Errorf("parseRedisAddrs(%q) = %v, %v; want an error naming --redis and %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || strings.Join(got, ",") != strings.Join(tc.want, ",") || tls != tc.tls {
			t.Errorf("parseRedisAddrs(%q) = %v, tls %v, %v; want %v, tls %v", tc.in, got, tls, err, tc.want, tc.tls)
		}
	}
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	code, errOut := sluiceFor(t, 10*time.Second, "serve", "--redis", "16479", "--listen", "127.0.0.1:0",
		"--grpc-listen", "", "--admin-listen", "127.0.0.1:0", "--rules", rules)
	if code != 1 || !strings.Contains(errOut, "--redis") {
		t.Errorf("serve --redis 16479: exit %d, stderr %q; want refused at start naming --redis", code, errOut)
	}
}

// TestBenchWords: one connection is "1 connection"; --grpc-health calls
// are reported as health checks, not decisions allowed; --target's help
// gives each default once.
func TestBenchWords(t *testing.T) {
	if got := plural(1, "connection"); got != "1 connection" {
		t.Errorf("plural(1, connection) = %q", got)
	}
	if got := plural(4, "connection"); got != "4 connections" {
		t.Errorf("plural(4, connection) = %q", got)
	}
	res := &loadgen.Result{Requests: 4, Allowed: 4, Elapsed: 2 * time.Second}
	res.Latency.Record(time.Millisecond)
	var b strings.Builder
	if err := newBenchReport(benchFlags{grpc: true, health: true}, res).writeText(&b); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); strings.Contains(got, "decision") || strings.Contains(got, "allowed") ||
		!strings.Contains(got, "health checks 4 in 2.00s: 2 checks/s") || !strings.Contains(got, "4 serving, 0 errors") {
		t.Errorf("--grpc-health report:\n%s\nwant health checks and serving, no decisions or allowed", got)
	}
	code, out, _ := sluice(t, "", "bench", "--help")
	line := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "--target") {
			line = l
		}
	}
	if code != 0 || strings.Count(line, "default") != 2 || strings.Count(line, "127.0.0.1:8080") != 1 || strings.Count(line, "127.0.0.1:8081") != 1 ||
		strings.Index(line, "127.0.0.1:8080") > strings.Index(line, "with --grpc") {
		t.Errorf("bench --help's --target line %q: want each default (HTTP, --grpc) once", line)
	}
}
