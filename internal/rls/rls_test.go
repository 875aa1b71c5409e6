package rls_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/rls"
	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/memory"
)

// env is an RLS server on a loopback listener, over a real embedded store,
// and a client made from go-control-plane's generated code.
type env struct {
	srv     *rls.Server
	client  rlsv3.RateLimitServiceClient
	conn    *grpc.ClientConn
	health  healthpb.HealthClient
	metrics *metrics.Metrics
	scrape  string // URL of /metrics
	log     *bytes.Buffer
}

func newEnv(t *testing.T, set *rules.Set) *env {
	t.Helper()
	return newEnvWith(t, set, nil)
}

// newEnvWith is newEnv with edit applied to the server's Config.
func newEnvWith(t *testing.T, set *rules.Set, edit func(*rls.Config)) *env {
	t.Helper()
	return newEnvOn(t, set, memory.DefaultConfig(), edit)
}

// newEnvOn is newEnvWith over a memory store of config mc (its Clock, say).
func newEnvOn(t *testing.T, set *rules.Set, mc memory.Config, edit func(*rls.Config)) *env {
	t.Helper()
	return newEnvStore(t, set, "memory", limitertest.Store(t, mc), edit)
}

// newEnvStore is newEnvWith over st, a store of kind name (its metrics label).
func newEnvStore(t *testing.T, set *rules.Set, name string, st limiter.Store, edit func(*rls.Config)) *env {
	t.Helper()
	m := metrics.New()
	log := &bytes.Buffer{}
	cfg := rls.Config{Metrics: m, AccessLog: slog.New(slog.NewJSONHandler(log, nil)), QuotaHeaders: true}
	if edit != nil {
		edit(&cfg)
	}
	srv := rls.New(m.Store(name, st), cfg)
	ix := limitertest.Compile(t, set)
	srv.SetRules(ix)
	m.SetRules(ix)

	conn := dial(t, serveGRPC(t, srv))
	hs := httptest.NewServer(m.Handler())
	t.Cleanup(hs.Close)
	return &env{srv: srv, client: rlsv3.NewRateLimitServiceClient(conn), conn: conn, health: healthpb.NewHealthClient(conn),
		metrics: m, scrape: hs.URL, log: log}
}

func (e *env) call(t *testing.T, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	return shouldRateLimit(t, e.client, req)
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func request(domain string, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds}
}

func hdrs(resp *rlsv3.RateLimitResponse) http.Header {
	h := http.Header{}
	for _, hv := range resp.ResponseHeadersToAdd {
		h.Add(hv.Key, hv.Value)
	}
	return h
}

var (
	minute = rules.Duration(time.Minute)
	ok     = rlsv3.RateLimitResponse_OK
	over   = rlsv3.RateLimitResponse_OVER_LIMIT
)

func TestAllowedThenDenied(t *testing.T) {
	e := newEnv(t, &rules.Set{Rules: []rules.Rule{
		{ID: "per-user", Limit: 2, Window: minute, By: rules.ByUser},
	}})
	req := request("edge", desc("user", "alice", "method", "GET", "path", "/api/orders?page=2"))
	for i := 1; i <= 2; i++ {
		resp := e.call(t, req)
		st := resp.Statuses[0]
		if resp.OverallCode != ok || st.Code != ok || st.LimitRemaining != uint32(2-i) {
			t.Fatalf("call %d = %v, want OK with %d remaining", i, resp, 2-i)
		}
		lim := st.CurrentLimit
		if lim.GetName() != "per-user" || lim.GetRequestsPerUnit() != 2 || lim.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || lim.GetUnitMultiplier() != nil {
			t.Errorf("call %d: current_limit = %v, want per-user, 2 per MINUTE", i, lim)
		}
		if d := st.DurationUntilReset.AsDuration(); d <= 0 || d > time.Minute {
			t.Errorf("call %d: duration_until_reset = %v, want in (0, 1m]", i, d)
		}
		h := hdrs(resp)
		if h.Get("X-RateLimit-Limit") != "2" || h.Get("X-RateLimit-Remaining") != strconv.Itoa(2-i) ||
			h.Get("RateLimit-Policy") != `"per-user";q=2;w=60` || !strings.HasPrefix(h.Get("RateLimit"), `"per-user";r=`+strconv.Itoa(2-i)+";t=") ||
			h.Get("X-RateLimit-Reset") == "" || h.Get("Retry-After") != "" || h.Get("Content-Type") != "" || resp.RawBody != nil {
			t.Errorf("call %d: headers %v, body %q, want the quota headers of docs/api.md, no Retry-After, no body", i, h, resp.RawBody)
		}
	}
	resp := e.call(t, req)
	st := resp.Statuses[0]
	if resp.OverallCode != over || st.Code != over || st.LimitRemaining != 0 || st.CurrentLimit.GetName() != "per-user" {
		t.Fatalf("3rd call = %v, want OVER_LIMIT with 0 remaining", resp)
	}
	h := hdrs(resp)
	retry, _ := strconv.Atoi(h.Get("Retry-After"))
	if h.Get("X-RateLimit-Remaining") != "0" || retry < 1 || retry > 30 || h.Get("Content-Type") != "application/json" {
		t.Errorf("3rd call: headers %v, want X-RateLimit-Remaining 0, Retry-After in [1, 30], JSON", h)
	}
	var body struct {
		Error      string `json:"error"`
		RetryAfter int    `json:"retry_after"`
	}
	if err := json.Unmarshal(resp.RawBody, &body); err != nil || body.Error != "rate_limit_exceeded" || body.RetryAfter != retry {
		t.Errorf("3rd call: raw_body %q, want {\"error\":\"rate_limit_exceeded\",\"retry_after\":%d}", resp.RawBody, retry)
	}
	// Another user has a bucket of their own.
	if resp := e.call(t, request("edge", desc("user", "bob"))); resp.OverallCode != ok {
		t.Errorf("bob = %v, want OK", resp)
	}
	// The access log has one line per request.
	if n := strings.Count(e.log.String(), `"msg":"decision"`); n != 4 {
		t.Errorf("access log has %d decision lines, want 4:\n%s", n, e.log)
	}
	if !strings.Contains(e.log.String(), `"code":"OVER_LIMIT"`) || !strings.Contains(e.log.String(), `"client":"user:alice"`) {
		t.Errorf("access log lacks the denial of user:alice:\n%s", e.log)
	}
}

func TestDomains(t *testing.T) {
	e := newEnv(t, &rules.Set{Rules: []rules.Rule{
		{ID: "edge-login", Match: rules.Match{Domain: "edge", Endpoint: "POST /login"}, By: rules.ByIP, Limit: 1, Window: minute},
		{ID: "internal-ip", Match: rules.Match{Domain: "internal"}, By: rules.ByIP, Limit: 5, Window: minute},
	}})
	login := desc("remote_address", "203.0.113.7", "method", "POST", "path", "/login")
	if resp := e.call(t, request("edge", login)); resp.OverallCode != ok || resp.Statuses[0].CurrentLimit.GetName() != "edge-login" {
		t.Fatalf("edge login = %v, want OK under edge-login", resp)
	}
	if resp := e.call(t, request("edge", login)); resp.OverallCode != over {
		t.Fatalf("2nd edge login = %v, want OVER_LIMIT", resp)
	}
	if resp := e.call(t, request("internal", login)); resp.OverallCode != ok || resp.Statuses[0].CurrentLimit.GetName() != "internal-ip" {
		t.Fatalf("internal login = %v, want OK under internal-ip: edge-login is not of this domain", resp)
	}
	// A domain no rule names, and no rule without a domain: OK, no limit,
	// no headers.
	resp := e.call(t, request("unknown", login, desc("user", "alice")))
	for i, st := range resp.Statuses {
		if st.Code != ok || st.CurrentLimit != nil || st.DurationUntilReset != nil {
			t.Errorf("unknown domain: status %d = %v, want OK without a limit", i, st)
		}
	}
	if resp.OverallCode != ok || len(resp.ResponseHeadersToAdd) != 0 {
		t.Errorf("unknown domain = %v, want OK without headers", resp)
	}
}

func TestHitsAddend(t *testing.T) {
	e := newEnv(t, &rules.Set{Rules: []rules.Rule{
		{ID: "tokens", Limit: 10, Window: minute, By: rules.ByUser},
	}})
	remaining := func(req *rlsv3.RateLimitRequest) (rlsv3.RateLimitResponse_Code, uint32) {
		resp := e.call(t, req)
		return resp.OverallCode, resp.Statuses[0].LimitRemaining
	}
	req := request("d", desc("user", "alice"))
	req.HitsAddend = 3
	if code, rem := remaining(req); code != ok || rem != 7 {
		t.Fatalf("request hits_addend 3 = %v, %d remaining, want OK, 7", code, rem)
	}
	// The descriptor's hits_addend overrides the request's.
	d := desc("user", "alice")
	d.HitsAddend = wrapperspb.UInt64(5)
	req = request("d", d)
	req.HitsAddend = 3
	if code, rem := remaining(req); code != ok || rem != 2 {
		t.Fatalf("descriptor hits_addend 5 = %v, %d remaining, want OK, 2", code, rem)
	}
	// A descriptor's hits_addend 0 checks without taking, as
	// envoyproxy/ratelimit does; the request's 0 (proto3's default) is 1.
	d = desc("user", "alice")
	d.HitsAddend = wrapperspb.UInt64(0)
	for i := range 2 {
		if code, rem := remaining(request("d", d)); code != ok || rem != 2 {
			t.Fatalf("descriptor hits_addend 0, check %d = %v, %d remaining, want OK, 2", i+1, code, rem)
		}
	}
	if code, rem := remaining(request("d", desc("user", "alice"))); code != ok || rem != 1 {
		t.Fatalf("request hits_addend 0 = %v, %d remaining, want OK, 1", code, rem)
	}
	// More than is left: denied, nothing taken.
	req = request("d", desc("user", "alice"))
	req.HitsAddend = 2
	if code, rem := remaining(req); code != over || rem != 1 {
		t.Fatalf("hits_addend 2 with 1 left = %v, %d remaining, want OVER_LIMIT, 1", code, rem)
	}
	// More than the bucket can ever hold: denied, no Retry-After.
	req.HitsAddend = 11
	resp := e.call(t, req)
	if h := hdrs(resp); resp.OverallCode != over || h.Get("Retry-After") != "" || !bytes.Contains(resp.RawBody, []byte("cost_exceeds_capacity")) {
		t.Fatalf("hits_addend 11 over a capacity of 10 = %v (headers %v), want OVER_LIMIT for cost_exceeds_capacity, no Retry-After", resp, h)
	}
	// Past 1,000,000,000 (algorithm.MaxLimit), at request or descriptor level,
	// the cost still decides: above every capacity, OVER_LIMIT, never an
	// error Envoy would turn into "allow".
	huge := desc("user", "alice")
	huge.HitsAddend = wrapperspb.UInt64(math.MaxUint64)
	bigReq := request("d", desc("user", "alice"))
	bigReq.HitsAddend = math.MaxUint32
	for _, req := range []*rlsv3.RateLimitRequest{bigReq, request("d", huge)} {
		resp := e.call(t, req)
		if resp.OverallCode != over || !bytes.Contains(resp.RawBody, []byte("cost_exceeds_capacity")) || resp.Statuses[0].LimitRemaining != 1 {
			t.Fatalf("hits_addend past 1e9 (%v) = %v, want OVER_LIMIT for cost_exceeds_capacity, 1 remaining", req, resp)
		}
	}
	// Exhausted: hits_addend 0 answers OK with 0 remaining, as
	// envoyproxy/ratelimit does (its count is not over the limit), and
	// takes nothing.
	if code, rem := remaining(request("d", desc("user", "alice"))); code != ok || rem != 0 {
		t.Fatalf("the last one = %v, %d remaining, want OK, 0", code, rem)
	}
	if code, rem := remaining(request("d", d)); code != ok || rem != 0 {
		t.Fatalf("hits_addend 0 when exhausted = %v, %d remaining, want OK, 0", code, rem)
	}
	if code, _ := remaining(request("d", desc("user", "alice"))); code != over {
		t.Fatalf("after an exhausting call = %v, want OVER_LIMIT", code)
	}
}

func TestShadow(t *testing.T) {
	e := newEnv(t, &rules.Set{Rules: []rules.Rule{
		{ID: "try", Limit: 1, Window: minute, By: rules.ByIP, Shadow: true},
	}})
	req := request("d", desc("remote_address", "2001:db8::1"))
	for i := range 3 {
		if resp := e.call(t, req); resp.OverallCode != ok || resp.Statuses[0].Code != ok {
			t.Fatalf("call %d under a shadow rule of limit 1 = %v, want OK", i+1, resp)
		}
	}
	if got := counter(t, e, "sluice_decisions_total", map[string]string{"rule": "try", "outcome": "shadow_denied", "source": "store"}); got != 2 {
		t.Errorf("shadow_denied decisions of rule try = %v, want 2", got)
	}
}

// TestAllOrNothing: an OVER_LIMIT answer consumes nothing from any
// descriptor, whether the descriptors agree (one check) or not (one check
// each, one atomic take).
func TestAllOrNothing(t *testing.T) {
	set := &rules.Set{Rules: []rules.Rule{
		{ID: "per-user", Limit: 10, Window: minute, By: rules.ByUser},
		{ID: "per-ip", Limit: 1, Window: minute, By: rules.ByIP},
	}}
	t.Run("agreeing descriptors are one check", func(t *testing.T) {
		e := newEnv(t, set)
		req := request("d", desc("user", "alice"), desc("remote_address", "203.0.113.7"))
		resp := e.call(t, req)
		if resp.OverallCode != ok {
			t.Fatalf("1st = %v, want OK", resp)
		}
		// Both descriptors report the one decision: per-ip, the most
		// restrictive.
		for i, st := range resp.Statuses {
			if st.CurrentLimit.GetName() != "per-ip" || st.LimitRemaining != 0 {
				t.Errorf("1st: status %d = %v, want per-ip with 0 remaining", i, st)
			}
		}
		if resp := e.call(t, req); resp.OverallCode != over {
			t.Fatalf("2nd = %v, want OVER_LIMIT (per-ip)", resp)
		}
		// The denied call took nothing from alice: 8 left (10, less the
		// first call and this one), not 7.
		if resp := e.call(t, request("d", desc("user", "alice"))); resp.Statuses[0].LimitRemaining != 8 {
			t.Errorf("alice after a denied call: %v, want 8 remaining", resp.Statuses[0])
		}
	})
	t.Run("disagreeing descriptors are one take", func(t *testing.T) {
		e := newEnv(t, set)
		user := desc("user", "alice")
		user.HitsAddend = wrapperspb.UInt64(2) // a cost of its own: not mergeable
		req := request("d", user, desc("remote_address", "203.0.113.7"))
		resp := e.call(t, req)
		if resp.OverallCode != ok || resp.Statuses[0].CurrentLimit.GetName() != "per-user" || resp.Statuses[0].LimitRemaining != 8 ||
			resp.Statuses[1].CurrentLimit.GetName() != "per-ip" || resp.Statuses[1].LimitRemaining != 0 {
			t.Fatalf("1st = %v, want OK: per-user 8 left, per-ip 0 left", resp)
		}
		// The headers describe the most restrictive: per-ip.
		if h := hdrs(resp); h.Get("RateLimit-Policy") != `"per-ip";q=1;w=60` {
			t.Errorf("1st: headers %v, want those of per-ip", h)
		}
		resp = e.call(t, req)
		if resp.OverallCode != over || resp.Statuses[0].Code != ok || resp.Statuses[1].Code != over {
			t.Fatalf("2nd = %v, want OVER_LIMIT from the ip descriptor", resp)
		}
		if resp := e.call(t, request("d", desc("user", "alice"))); resp.Statuses[0].LimitRemaining != 7 {
			t.Errorf("alice after a denied call: %v, want 7 remaining (8, less this call's 1)", resp.Statuses[0])
		}
	})
	t.Run("conflicting values are one check each", func(t *testing.T) {
		e := newEnv(t, set)
		req := request("d", desc("user", "alice"), desc("user", "bob"))
		resp := e.call(t, req)
		if resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 9 || resp.Statuses[1].LimitRemaining != 9 {
			t.Fatalf("alice and bob = %v, want OK with 9 left each", resp)
		}
		// A bucket named by two disagreeing descriptors is charged for
		// both.
		d2 := desc("user", "alice")
		d2.HitsAddend = wrapperspb.UInt64(3)
		resp = e.call(t, request("d", desc("user", "alice"), d2))
		if resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 5 || resp.Statuses[1].LimitRemaining != 5 {
			t.Fatalf("alice twice, costs 1 and 3 = %v, want OK with 5 left", resp)
		}
	})
}

func TestInvalidArgument(t *testing.T) {
	e := newEnv(t, &rules.Set{})
	negative := desc("user", "a")
	negative.IsNegativeHits = true
	tooMany := request("d")
	for range 33 {
		tooMany.Descriptors = append(tooMany.Descriptors, desc("user", "a"))
	}
	tests := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{"no domain", request("", desc("user", "a")), "domain: required"},
		{"no descriptors", request("d"), "descriptors: want at least one"},
		{"too many descriptors", tooMany, "descriptors: want at most 32, got 33"},
		{"empty key", request("d", desc("user", "a", "", "x")), "descriptors[0].entries[1].key: required"},
		{"negative hits", request("d", negative), "descriptors[0].is_negative_hits: not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.client.ShouldRateLimit(context.Background(), tt.req)
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), "rls: "+tt.want) {
				t.Errorf("ShouldRateLimit = %v %q, want InvalidArgument %q", st.Code(), st.Message(), "rls: "+tt.want)
			}
		})
	}
	if got := counter(t, e, "sluice_rls_requests_total", map[string]string{"code": "InvalidArgument"}); got != float64(len(tests)) {
		t.Errorf("sluice_rls_requests_total{code=InvalidArgument} = %v, want %d", got, len(tests))
	}
}

func TestHealth(t *testing.T) {
	e := newEnv(t, &rules.Set{})
	for _, svc := range []string{"", rls.ServiceName} {
		resp, err := e.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("Health.Check(%q) = %v, %v, want SERVING", svc, resp, err)
		}
	}
	e.srv.Shutdown()
	resp, err := e.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: rls.ServiceName})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("after Shutdown: Health.Check = %v, %v, want NOT_SERVING", resp, err)
	}
}

func TestMetrics(t *testing.T) {
	e := newEnv(t, &rules.Set{Revision: 3, Rules: []rules.Rule{
		{ID: "per-user", Limit: 1, Window: minute, By: rules.ByUser},
	}})
	denied := map[string]string{"rule": "per-user", "outcome": "denied", "source": "store"}
	allowed := map[string]string{"rule": "per-user", "outcome": "allowed", "source": "store"}
	if got := counter(t, e, "sluice_decisions_total", denied); got != 0 {
		t.Fatalf("denied before any call = %v, want 0 (series made with the rules)", got)
	}
	req := request("d", desc("user", "alice"))
	e.call(t, req)
	e.call(t, req)
	e.call(t, req)
	e.call(t, request("d", desc("remote_address", "203.0.113.7"))) // no rule
	if got := counter(t, e, "sluice_decisions_total", allowed); got != 1 {
		t.Errorf("allowed = %v, want 1", got)
	}
	if got := counter(t, e, "sluice_decisions_total", denied); got != 2 {
		t.Errorf("denied = %v, want 2", got)
	}
	if got := counter(t, e, "sluice_decisions_total", map[string]string{"rule": "", "outcome": "allowed", "source": "store"}); got != 1 {
		t.Errorf("allowed with no rule = %v, want 1", got)
	}
	fams := scrape(t, e)
	if h := find(fams["sluice_decision_duration_seconds"], map[string]string{"api": "grpc"}); h == nil || h.GetHistogram().GetSampleCount() != 4 {
		t.Errorf("sluice_decision_duration_seconds{api=grpc} = %v, want 4 samples", h)
	}
	if h := find(fams["sluice_store_duration_seconds"], map[string]string{"store": "memory"}); h == nil || h.GetHistogram().GetSampleCount() != 3 {
		t.Errorf("sluice_store_duration_seconds{store=memory} = %v, want 3 samples (the call with no rule takes nothing)", h)
	}
	if g := find(fams["sluice_rules_revision"], nil); g.GetGauge().GetValue() != 3 {
		t.Errorf("sluice_rules_revision = %v, want 3", g)
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if fams[name] == nil {
			t.Errorf("%s missing: want the Go and process collectors", name)
		}
	}

	// Deleting the rule drops its series.
	ix := limitertest.Compile(t, &rules.Set{Revision: 4, Rules: []rules.Rule{{ID: "other", Limit: 1, Window: minute}}})
	e.srv.SetRules(ix)
	e.metrics.SetRules(ix)
	fams = scrape(t, e)
	for _, m := range fams["sluice_decisions_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "rule" && l.GetValue() == "per-user" {
				t.Errorf("a series of the deleted rule per-user is still exported: %v", m)
			}
		}
	}
	if find(fams["sluice_decisions_total"], map[string]string{"rule": "other", "outcome": "allowed", "source": "store"}) == nil {
		t.Error("no series for the new rule other")
	}
}

func scrape(t *testing.T, e *env) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(e.scrape)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// find returns the metric of fam whose labels include want.
func find(fam *dto.MetricFamily, want map[string]string) *dto.Metric {
	for _, m := range fam.GetMetric() {
		n := 0
		for _, l := range m.GetLabel() {
			if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
				n++
			}
		}
		// An empty label value is not exported: count the wanted ones.
		for k, v := range want {
			if v == "" && !hasLabel(m, k) {
				n++
			}
		}
		if n == len(want) {
			return m
		}
	}
	return nil
}

func hasLabel(m *dto.Metric, name string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return true
		}
	}
	return false
}

func counter(t *testing.T, e *env, name string, labels map[string]string) float64 {
	t.Helper()
	m := find(scrape(t, e)[name], labels)
	if m == nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// TestEnvoyHeaders: with Config.EnvoyHeaders the answer also carries
// envoyproxy/ratelimit's RateLimit-Limit, RateLimit-Remaining and
// RateLimit-Reset of the most restrictive descriptor, after sluice's own
// headers; without it, none of them; and none when no rule matched.
func TestEnvoyHeaders(t *testing.T) {
	set := &rules.Set{Rules: []rules.Rule{
		{ID: "per-user", Limit: 10, Window: minute, By: rules.ByUser, Algorithm: algorithm.FixedWindow},
		{ID: "per-ip", Limit: 2, Window: rules.Duration(time.Hour), By: rules.ByIP, Algorithm: algorithm.FixedWindow},
	}}
	e := newEnvWith(t, set, func(c *rls.Config) { c.EnvoyHeaders = true })
	user := desc("user", "alice")
	user.HitsAddend = wrapperspb.UInt64(2) // not merged: one status each
	req := request("d", user, desc("remote_address", "203.0.113.7"))
	for i, want := range []struct {
		code             rlsv3.RateLimitResponse_Code
		limit, remaining string
	}{{ok, "2", "1"}, {ok, "2", "0"}, {over, "2", "0"}} {
		resp := e.call(t, req)
		h := hdrs(resp)
		if resp.OverallCode != want.code || h.Get(rls.EnvoyLimitHeader) != want.limit || h.Get(rls.EnvoyRemainingHeader) != want.remaining {
			t.Fatalf("call %d = %v, headers %v; want %v with RateLimit-Limit %s, RateLimit-Remaining %s",
				i+1, resp.OverallCode, h, want.code, want.limit, want.remaining)
		}
		st := resp.Statuses[1]
		wantReset := strconv.FormatInt(int64((st.DurationUntilReset.AsDuration()+time.Second-1)/time.Second), 10)
		if got := h.Get(rls.EnvoyResetHeader); got != wantReset || got == "0" {
			t.Errorf("call %d: RateLimit-Reset %q, want %s (per-ip's duration_until_reset %v, rounded up)", i+1, got, wantReset, st.DurationUntilReset.AsDuration())
		}
		if n := len(resp.ResponseHeadersToAdd); resp.ResponseHeadersToAdd[n-3].Key != rls.EnvoyLimitHeader || h.Get("X-RateLimit-Limit") == "" {
			t.Errorf("call %d: headers %v, want sluice's own, then envoyproxy/ratelimit's three", i+1, resp.ResponseHeadersToAdd)
		}
	}
	if resp := e.call(t, request("d", desc("generic_key", "x"))); len(resp.ResponseHeadersToAdd) != 0 {
		t.Errorf("no rule matched: headers %v, want none", resp.ResponseHeadersToAdd)
	}
	off := newEnv(t, set)
	if h := hdrs(off.call(t, req)); h.Get(rls.EnvoyLimitHeader) != "" || h.Get(rls.EnvoyRemainingHeader) != "" || h.Get(rls.EnvoyResetHeader) != "" {
		t.Errorf("without EnvoyHeaders: headers %v, want none of envoyproxy/ratelimit's", h)
	}
}

// TestOwnLimit: a descriptor's own limit (Envoy's dynamic limits) takes
// the place of the configured limit of its entries, as in
// envoyproxy/ratelimit: a fixed window per unit, in a bucket of its own
// per domain, unit and entries. The other rules still apply; a domain no
// rule names has no limits; requests_per_unit 0 denies every call (see
// TestOwnLimitZero); an unknown unit leaves the configured limit in force.
func TestOwnLimit(t *testing.T) {
	e := newEnv(t, &rules.Set{Rules: []rules.Rule{
		{ID: "per-tenant", Match: rules.Match{Domain: "d", Entries: []rules.Entry{{Key: "tenant"}}}, By: "entry:tenant",
			Limit: 5, Window: minute, Algorithm: algorithm.FixedWindow},
		{ID: "per-user", Limit: 1, Window: minute, By: rules.ByUser},
	}})
	own := func(domain string, rpu uint32, unit typev3.RateLimitUnit, kv ...string) *rlsv3.RateLimitRequest {
		d := desc(kv...)
		d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
		return request(domain, d)
	}
	type want struct {
		code      rlsv3.RateLimitResponse_Code
		name      string
		rpu       uint32
		unit      rlsv3.RateLimitResponse_RateLimit_Unit
		remaining uint32
	}
	const perMin, hour = rlsv3.RateLimitResponse_RateLimit_MINUTE, rlsv3.RateLimitResponse_RateLimit_HOUR
	for i, s := range []struct {
		req  *rlsv3.RateLimitRequest
		want want
	}{
		{own("d", 2, typev3.RateLimitUnit_MINUTE, "tenant", "acme"), want{ok, "", 2, perMin, 1}},
		{own("d", 2, typev3.RateLimitUnit_MINUTE, "tenant", "acme"), want{ok, "", 2, perMin, 0}},
		{own("d", 2, typev3.RateLimitUnit_MINUTE, "tenant", "acme"), want{over, "", 2, perMin, 0}},
		// The configured limit's bucket is its own.
		{request("d", desc("tenant", "acme")), want{ok, "", 5, perMin, 4}},
		// Another requests_per_unit: the same bucket, as a rule edit keeps it.
		{own("d", 3, typev3.RateLimitUnit_MINUTE, "tenant", "acme"), want{ok, "", 3, perMin, 0}},
		// Another unit: a bucket of its own.
		{own("d", 2, typev3.RateLimitUnit_HOUR, "tenant", "acme"), want{ok, "", 2, hour, 1}},
		// requests_per_unit 0 is a limit of 0, as in envoyproxy/ratelimit:
		// every call is denied, and takes nothing from per-tenant.
		{own("d", 0, typev3.RateLimitUnit_MINUTE, "tenant", "acme"), want{over, "", 0, perMin, 0}},
		{own("d", 0, typev3.RateLimitUnit_HOUR, "tenant", "acme"), want{over, "", 0, hour, 0}},
		// An unknown unit is not honoured: the configured limit decides.
		{own("d", 9, typev3.RateLimitUnit_UNKNOWN, "tenant", "acme"), want{ok, "", 5, perMin, 3}},
		// The other rules still apply: per-user allows one.
		{own("d", 10, typev3.RateLimitUnit_MINUTE, "user", "bob"), want{ok, "per-user", 1, perMin, 0}},
		{own("d", 10, typev3.RateLimitUnit_MINUTE, "user", "bob"), want{over, "per-user", 1, perMin, 0}},
	} {
		resp := e.call(t, s.req)
		st := resp.Statuses[0]
		if st.Code != s.want.code || st.CurrentLimit.GetName() != s.want.name || st.CurrentLimit.GetRequestsPerUnit() != s.want.rpu ||
			st.CurrentLimit.GetUnit() != s.want.unit || st.LimitRemaining != s.want.remaining {
			t.Fatalf("call %d (%v) = %v, want %+v", i+1, s.req, st, s.want)
		}
	}
	// A domain no rule names: no limits, its own neither.
	if resp := e.call(t, own("zzz", 1, typev3.RateLimitUnit_MINUTE, "tenant", "acme")); resp.Statuses[0].CurrentLimit != nil || resp.OverallCode != ok {
		t.Fatalf("unknown domain with a limit = %v, want OK without current_limit", resp)
	}
}

// TestOwnLimitZero: a descriptor's own limit of requests_per_unit 0 denies
// every call of that descriptor, as envoyproxy/ratelimit does (its count
// after the call is over 0), a check with hits_addend 0 included (as a
// limit: 0 rule answers it), and the request's other descriptors are then
// not counted (a denied call consumes nothing).
func TestOwnLimitZero(t *testing.T) {
	e := newEnv(t, &rules.Set{Rules: []rules.Rule{
		{ID: "per-tenant", Match: rules.Match{Domain: "d", Entries: []rules.Entry{{Key: "tenant"}}}, By: "entry:tenant",
			Limit: 5, Window: minute, Algorithm: algorithm.FixedWindow},
	}})
	zero := desc("tenant", "blocked")
	zero.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 0, Unit: typev3.RateLimitUnit_SECOND}
	peek := desc("tenant", "blocked")
	peek.Limit = zero.Limit
	peek.HitsAddend = wrapperspb.UInt64(0)
	for i, req := range []*rlsv3.RateLimitRequest{
		request("d", zero), request("d", peek), request("d", desc("tenant", "acme"), zero), request("d", zero),
	} {
		resp := e.call(t, req)
		last := resp.Statuses[len(resp.Statuses)-1]
		if resp.OverallCode != over || last.Code != over || last.CurrentLimit == nil || last.CurrentLimit.GetName() != "" ||
			last.CurrentLimit.GetRequestsPerUnit() != 0 || last.LimitRemaining != 0 {
			t.Fatalf("call %d = %v, want OVER_LIMIT by the own limit (no name), requests_per_unit 0, 0 remaining", i+1, resp)
		}
	}
	if st := e.call(t, request("d", desc("tenant", "acme"))).Statuses[0]; st.Code != ok || st.LimitRemaining != 4 {
		t.Fatalf("acme after the denied request = %v, want OK with 4 remaining (nothing taken)", st)
	}
}
