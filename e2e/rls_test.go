package e2e

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/testkit/listentest"
)

// TestEnvoyRLS runs sluice serve with --grpc-listen, --envoy-quota-headers and --access-log and
// asks it through Envoy's API, with go-control-plane's client: the same
// buckets as the HTTP API, denials with statuses and headers, domains,
// malformed requests, the health service, metrics and pprof.
func TestEnvoyRLS(t *testing.T) {
	addr := listentest.FreeAddr(t)
	in := serve(t, filepath.Join(t.TempDir(), "rules.yaml"), "--grpc-listen", addr, "--envoy-quota-headers", "--access-log", "--log-format", "json", "--pprof")
	in.putRule(t, map[string]any{"id": "per-user", "by": "user", "limit": 3, "window": "1m"})
	in.putRule(t, map[string]any{"id": "edge-login", "by": "ip", "limit": 1, "window": "1h",
		"match": map[string]any{"domain": "edge", "endpoint": "POST /login"}})

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlsv3.NewRateLimitServiceClient(conn)
	ask := func(domain string, kv ...string) *rlsv3.RateLimitResponse {
		t.Helper()
		d := &ratelimitv3.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatalf("ShouldRateLimit(%s %v) = %v", domain, kv, err)
		}
		return resp
	}
	header := func(resp *rlsv3.RateLimitResponse, name string) string {
		for _, h := range resp.ResponseHeadersToAdd {
			if strings.EqualFold(h.Key, name) {
				return h.Value
			}
		}
		return ""
	}

	// One bucket for both APIs: one call through HTTP, two through gRPC.
	if a, _ := in.check(t, map[string]any{"user": "alice", "endpoint": "GET /api/orders"}); !a.Allowed || a.Remaining != 2 {
		t.Fatalf("HTTP check = %+v, want allowed with 2 left", a)
	}
	resp := ask("edge", "user", "alice", "method", "GET", "path", "/api/orders")
	if st := resp.Statuses[0]; resp.OverallCode != rlsv3.RateLimitResponse_OK || st.LimitRemaining != 1 ||
		st.CurrentLimit.GetName() != "per-user" || st.CurrentLimit.GetRequestsPerUnit() != 3 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE {
		t.Fatalf("gRPC after one HTTP call = %v, want OK, per-user 3 per MINUTE, 1 left", resp)
	}
	if got := header(resp, "X-RateLimit-Remaining"); got != "1" {
		t.Errorf("X-RateLimit-Remaining = %q, want 1", got)
	}
	ask("edge", "user", "alice")
	resp = ask("edge", "user", "alice")
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("4th call = %v, want OVER_LIMIT", resp)
	}
	if header(resp, "Retry-After") == "" || header(resp, "RateLimit-Policy") != `"per-user";q=3;w=60` ||
		header(resp, "Content-Type") != "application/json" || !strings.Contains(string(resp.RawBody), `"error":"rate_limit_exceeded"`) {
		t.Errorf("4th call: headers %v, body %q, want the 429 of docs/api.md", resp.ResponseHeadersToAdd, resp.RawBody)
	}
	// The HTTP API sees the denial too.
	if a, _ := in.check(t, map[string]any{"user": "alice"}); a.Allowed {
		t.Errorf("HTTP check after the gRPC calls = %+v, want denied", a)
	}

	// A domain's rule applies in that domain only; an unknown domain with no
	// matching rule is OK without a limit.
	if resp := ask("edge", "remote_address", "203.0.113.9", "method", "POST", "path", "/login"); resp.Statuses[0].CurrentLimit.GetName() != "edge-login" {
		t.Errorf("edge login = %v, want rule edge-login", resp)
	}
	if resp := ask("edge", "remote_address", "203.0.113.9", "method", "POST", "path", "/login"); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("2nd edge login = %v, want OVER_LIMIT", resp)
	}
	if resp := ask("other", "remote_address", "203.0.113.9", "method", "POST", "path", "/login"); resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit != nil {
		t.Errorf("login in an unknown domain = %v, want OK with no limit", resp)
	}

	// Malformed: InvalidArgument naming the field.
	_, err = rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge"})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "descriptors: want at least one") {
		t.Errorf("no descriptors: %v %q, want InvalidArgument about descriptors", st.Code(), st.Message())
	}

	// The standard health service.
	h, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health = %v, %v, want SERVING", h, err)
	}

	// Metrics on the data plane: the decisions of both APIs are counted
	// (per-user: 1 HTTP + 2 gRPC allowed, 1 gRPC + 1 HTTP denied).
	fams := scrapeMetrics(t, in.data+"/metrics")
	for _, tt := range []struct {
		rule, outcome string
		want          float64
	}{{"per-user", "allowed", 3}, {"per-user", "denied", 2}, {"edge-login", "denied", 1}} {
		if got := counterValue(fams["sluice_decisions_total"], map[string]string{"rule": tt.rule, "outcome": tt.outcome, "source": "store"}); got != tt.want {
			t.Errorf("sluice_decisions_total{rule=%q,outcome=%q} = %v, want %v", tt.rule, tt.outcome, got, tt.want)
		}
	}
	if got := counterValue(fams["sluice_rls_requests_total"], map[string]string{"code": "InvalidArgument"}); got != 1 {
		t.Errorf("sluice_rls_requests_total{code=InvalidArgument} = %v, want 1", got)
	}
	for _, name := range []string{"sluice_store_buckets", "sluice_rules_revision", "sluice_decision_duration_seconds", "go_goroutines"} {
		if fams[name] == nil {
			t.Errorf("/metrics has no %s", name)
		}
	}

	// pprof on the admin listener (asked for with --pprof).
	if resp := do(t, "GET", in.admin+"/debug/pprof/", nil, nil); resp.StatusCode != 200 {
		t.Errorf("GET /debug/pprof/ on the admin listener: %d, want 200", resp.StatusCode)
	}

	// One access log line per decision, through either API.
	in.stop()
	log := in.log.String()
	// 2 HTTP checks, 6 gRPC decisions, 1 malformed gRPC request.
	if n := strings.Count(log, `"msg":"decision"`); n != 9 {
		t.Errorf("%d access log lines, want one per call (9):\n%s", n, log)
	}
	if !strings.Contains(log, `"api":"grpc"`) || !strings.Contains(log, `"api":"http"`) || !strings.Contains(log, `"code":"OVER_LIMIT"`) {
		t.Errorf("access log lacks the gRPC and HTTP decisions:\n%s", log)
	}
}

// TestPprofNeedsTheAdminToken: with --pprof and --admin-token,
// /debug/pprof/ asks for the token like the rest of the admin API, and
// /debug/pprof/cmdline is not served even then.
func TestPprofNeedsTheAdminToken(t *testing.T) {
	t.Setenv("SLUICE_ADMIN_TOKEN", "s3cret")
	in := serve(t, filepath.Join(t.TempDir(), "rules.yaml"), "--pprof")
	for _, tt := range []struct {
		path, auth string
		want       int
	}{
		{"/debug/pprof/heap", "", 401}, {"/debug/pprof/heap", "Bearer wrong", 401}, {"/debug/pprof/heap", "Bearer s3cret", 200},
		{"/debug/pprof/cmdline", "", 401}, {"/debug/pprof/cmdline", "Bearer s3cret", 404},
	} {
		req, _ := http.NewRequest("GET", in.admin+tt.path, nil)
		if tt.auth != "" {
			req.Header.Set("Authorization", tt.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("GET %s with %q: %d, want %d", tt.path, tt.auth, resp.StatusCode, tt.want)
		}
	}
}

// TestPprofNeverServesTheCommandLine: /debug/pprof/cmdline once answered
// sluice's command line, --redis-password included, to anyone who could
// reach the default admin API. Profiling is off by default, and the
// command line is never served.
func TestPprofNeverServesTheCommandLine(t *testing.T) {
	in := serve(t, filepath.Join(t.TempDir(), "rules.yaml"), "--redis-password", "hunter2-secret")
	for _, p := range []string{"/debug/pprof/cmdline", "/debug/pprof/", "/debug/pprof/heap"} {
		resp, err := http.Get(in.admin + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 404 || strings.Contains(string(b), "hunter2") {
			t.Errorf("GET %s without --pprof: %d %.200s, want 404 without the command line", p, resp.StatusCode, b)
		}
	}
}

func scrapeMetrics(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	return fams
}

// counterValue returns the counter of fam whose labels include want, 0 if
// none.
func counterValue(fam *dto.MetricFamily, want map[string]string) float64 {
	for _, m := range fam.GetMetric() {
		n := 0
		for _, l := range m.GetLabel() {
			if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
				n++
			}
		}
		if n == len(want) {
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
