package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/rulestore"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/failover"
	"github.com/sluicehq/sluice/store/memory"
)

func compile(t testing.TB, s *rules.Set) *rules.Index {
	t.Helper()
	ix, err := rules.Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

// gather returns the metric families of m, as a scrape of Handler parses
// them.
func gather(t *testing.T, m *Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// series returns "labels=value" for every series of fam, e.g.
// "outcome=denied,rule=a,source=store 2".
func series(fam *dto.MetricFamily) []string {
	var out []string
	for _, m := range fam.GetMetric() {
		var ls []string
		for _, l := range m.GetLabel() {
			ls = append(ls, l.GetName()+"="+l.GetValue())
		}
		v := m.GetCounter().GetValue()
		if m.Gauge != nil {
			v = m.GetGauge().GetValue()
		}
		out = append(out, fmt.Sprintf("%s %g", strings.Join(ls, ","), v))
	}
	return out
}

func TestDecisions(t *testing.T) {
	sec := rules.Duration(time.Second)
	ix := compile(t, &rules.Set{Revision: 2, Rules: []rules.Rule{
		{ID: "a", Limit: 1, Window: sec},
		{ID: "b", Limit: 1, Window: sec},
		{ID: "shadow", Limit: 1, Window: sec, Shadow: true},
	}})
	a, _ := ix.Rule("a")
	b, _ := ix.Rule("b")
	m := New()
	m.SetRules(ix)
	m.Decision(&limiter.Decision{Allowed: true, Rule: a})
	m.Decision(&limiter.Decision{Allowed: true, Rule: a})
	m.Decision(&limiter.Decision{Allowed: false, Rule: a, Origin: limiter.OriginLocalDenialCache})
	m.Decision(&limiter.Decision{Allowed: false, Rule: b, Origin: limiter.OriginUnavailable})
	m.Decision(&limiter.Decision{Allowed: true, Rule: b, ShadowDenied: "shadow", Origin: limiter.OriginLocalFallback})
	m.Decision(&limiter.Decision{Allowed: true})
	got := strings.Join(series(gather(t, m)["sluice_decisions_total"]), "\n")
	for _, never := range []string{"outcome=shadow_denied,rule=a,", "outcome=denied,rule=shadow,", "outcome=denied,rule=,"} {
		if strings.Contains(got, never) {
			t.Errorf("sluice_decisions_total has a series that cannot happen, %q:\n%s", never, got)
		}
	}
	for _, want := range []string{
		"outcome=allowed,rule=a,source=store 2",
		"outcome=denied,rule=a,source=store 0",
		"outcome=denied,rule=a,source=local_denial_cache 1",
		"outcome=denied,rule=b,source=unavailable 1",
		"outcome=shadow_denied,rule=shadow,source=local_fallback 1",
		"outcome=allowed,rule=,source=store 1", // no rule matched
	} {
		if !strings.Contains(got+"\n", want+"\n") {
			t.Errorf("sluice_decisions_total lacks %q:\n%s", want, got)
		}
	}
	if g := gather(t, m)["sluice_rules_revision"]; g.GetMetric()[0].GetGauge().GetValue() != 2 {
		t.Errorf("sluice_rules_revision = %v, want 2", g)
	}

	// A new rule set: the series of b (deleted) go, a's stay with their
	// counts, decisions under the old set's rules still count.
	ix2 := compile(t, &rules.Set{Revision: 3, Rules: []rules.Rule{{ID: "a", Limit: 5, Window: sec}, {ID: "c", Limit: 1, Window: sec}}})
	m.SetRules(ix2)
	m.Decision(&limiter.Decision{Allowed: true, Rule: a}) // a of the old set
	a2, _ := ix2.Rule("a")
	m.Decision(&limiter.Decision{Allowed: true, Rule: a2})
	got = strings.Join(series(gather(t, m)["sluice_decisions_total"]), "\n")
	if strings.Contains(got, "rule=b") || strings.Contains(got, "rule=shadow") {
		t.Errorf("series of deleted rules remain:\n%s", got)
	}
	for _, want := range []string{"outcome=allowed,rule=a,source=store 4", "outcome=allowed,rule=c,source=store 0", "outcome=denied,rule=c,source=store 0"} {
		if !strings.Contains(got+"\n", want+"\n") {
			t.Errorf("after the rules change, sluice_decisions_total lacks %q:\n%s", want, got)
		}
	}
}

func TestDecisionDoesNotAllocate(t *testing.T) {
	ix := compile(t, &rules.Set{Rules: []rules.Rule{{ID: "a", Limit: 1, Window: rules.Duration(time.Second)}}})
	a, _ := ix.Rule("a")
	m := New()
	m.SetRules(ix)
	for _, d := range []*limiter.Decision{
		{Allowed: true, Rule: a},
		{Allowed: false, Rule: a},
		{Allowed: false, Rule: a, Origin: limiter.OriginLocalDenialCache},
		{Allowed: true},
	} {
		m.Decision(d) // makes the series of a source other than store
		if n := testing.AllocsPerRun(100, func() {
			m.Decision(d)
			m.Latency(APIGRPC, time.Millisecond)
			m.RLSAnswer("OK")
		}); n != 0 {
			t.Errorf("Decision(%+v) allocates %v times, want 0", d, n)
		}
	}
}

type fakeStore struct{ err error }

func (s fakeStore) Take(_ context.Context, ops []limiter.Op, res []algorithm.Result) (limiter.TakeInfo, error) {
	for i := range ops {
		res[i] = algorithm.Result{Allowed: true}
	}
	return limiter.TakeInfo{Now: 1}, s.err
}

func TestStore(t *testing.T) {
	m := New()
	ok := m.Store("memory", fakeStore{})
	failing := m.Store("redis", fakeStore{err: context.DeadlineExceeded})
	ops := []limiter.Op{{Client: "user:a", Rule: "a"}}
	res := make([]algorithm.Result, 1)
	for range 3 {
		if info, err := ok.Take(context.Background(), ops, res); err != nil || info.Now != 1 || !res[0].Allowed {
			t.Fatalf("Take = %v, %v, %v, want what the store answered", info, err, res)
		}
	}
	if _, err := failing.Take(context.Background(), ops, res); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Take = %v, want the store's error", err)
	}
	fams := gather(t, m)
	for _, m := range fams["sluice_store_duration_seconds"].GetMetric() {
		want := uint64(3)
		if m.GetLabel()[0].GetValue() == "redis" {
			want = 1
		}
		if got := m.GetHistogram().GetSampleCount(); got != want {
			t.Errorf("sluice_store_duration_seconds{%v} has %d samples, want %d", m.GetLabel(), got, want)
		}
	}
	if got := series(fams["sluice_store_errors_total"]); len(got) != 1 || got[0] != "kind=timeout,store=redis 1" {
		t.Errorf("sluice_store_errors_total = %v, want one timeout of redis", got)
	}
	if n := testing.AllocsPerRun(100, func() { ok.Take(context.Background(), ops, res) }); n != 0 {
		t.Errorf("Store.Take allocates %v times, want 0", n)
	}
}

// errRedis stands for an error reply only the store can name.
var errRedis = errors.New("ERR from the server")

// namingStore is a store that reserves and names errRedis "redis", as
// store/redis and store/failover name a Redis error reply.
type namingStore struct{ fakeStore }

func (s namingStore) Reserve(ctx context.Context, ops []limiter.Op, res []algorithm.Result, _ int64) (limiter.TakeInfo, int64, error) {
	info, err := s.Take(ctx, ops, res)
	return info, 7, err
}

func (namingStore) ErrorKind(err error) string {
	if errors.Is(err, errRedis) {
		return "redis"
	}
	return ""
}

// TestStoreReserve: a reservation is timed and its errors counted as a take
// is, under the kind the store names; a store that cannot reserve says so.
func TestStoreReserve(t *testing.T) {
	m := New()
	st := m.Instrument(namingStore{fakeStore{err: errRedis}})
	ops := []limiter.Op{{Client: "user:a", Rule: "a"}}
	res := make([]algorithm.Result, 1)
	if _, err := st.Take(context.Background(), ops, res); !errors.Is(err, errRedis) {
		t.Fatalf("Take = %v, want the store's error", err)
	}
	if info, wait, err := st.Reserve(context.Background(), ops, res, 10); !errors.Is(err, errRedis) || info.Now != 1 || wait != 7 {
		t.Fatalf("Reserve = %v, %d, %v, want what the store answered", info, wait, err)
	}
	fams := gather(t, m)
	if got := series(fams["sluice_store_errors_total"]); len(got) != 1 || got[0] != "kind=redis,store=other 2" {
		t.Errorf("sluice_store_errors_total = %v, want the take's and the reservation's error, both of kind redis", got)
	}
	if got := fams["sluice_store_duration_seconds"].GetMetric(); len(got) != 1 || got[0].GetHistogram().GetSampleCount() != 2 {
		t.Errorf("sluice_store_duration_seconds = %v, want 2 samples", got)
	}
	ok := m.Store("memory", namingStore{})
	if n := testing.AllocsPerRun(100, func() { ok.Reserve(context.Background(), ops, res, 10) }); n != 0 {
		t.Errorf("Store.Reserve allocates %v times, want 0", n)
	}

	_, _, err := m.Store("plain", fakeStore{}).Reserve(context.Background(), ops, res, 10)
	if !errors.Is(err, limiter.ErrReserveUnsupported) || !strings.Contains(err.Error(), "metrics.fakeStore") {
		t.Errorf("Reserve on a store that cannot reserve = %v, want ErrReserveUnsupported naming the store", err)
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestErrorKind(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{context.DeadlineExceeded, "timeout"},
		{fmt.Errorf("x: %w", os.ErrDeadlineExceeded), "timeout"},
		{&net.OpError{Op: "read", Err: timeoutErr{}}, "timeout"},
		{context.Canceled, "canceled"},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, "network"},
		{net.ErrClosed, "network"},
		{fmt.Errorf("redis: %w", limiter.ErrStoreReply), "reply"},
		{limiter.ErrTooManyRules, "too_many_rules"},
		{errors.New("something else"), "other"},
	}
	for _, tt := range tests {
		if got := ErrorKind(tt.err); got != tt.want {
			t.Errorf("ErrorKind(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

// TestInstrument: a store's own state reaches the metrics through the
// interfaces it implements, under the store label its kind gives.
func TestInstrument(t *testing.T) {
	mem, err := memory.New(memory.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	m := New()
	st := m.Instrument(mem)
	ops := []limiter.Op{{Client: "user:a", Rule: "a", Cost: 1, Params: algorithm.Params{Limit: 5, Window: int64(time.Second / time.Microsecond)}}}
	res := make([]algorithm.Result, 1)
	if _, err := st.Take(context.Background(), ops, res); err != nil {
		t.Fatal(err)
	}
	fams := gather(t, m)
	if got := series(fams["sluice_store_buckets"]); len(got) != 1 || got[0] != " 1" {
		t.Errorf("sluice_store_buckets = %v, want 1", got)
	}
	if got := fams["sluice_store_duration_seconds"].GetMetric(); len(got) != 1 || got[0].GetLabel()[0].GetValue() != "memory" {
		t.Errorf("sluice_store_duration_seconds = %v, want store=memory", got)
	}
	if fams["sluice_store_breaker_state"] != nil {
		t.Errorf("the memory store exports a breaker state")
	}

	down := errors.New("connection refused")
	fo := failover.New(func(context.Context) (failover.Primary, error) { return nil, down }, failover.Config{})
	defer fo.Close()
	m = New()
	st = m.Instrument(fo)
	if _, err := st.Take(context.Background(), ops, res); err != nil {
		t.Fatal(err)
	}
	fams = gather(t, m)
	if got := strings.Join(series(fams["sluice_store_breaker_state"]), ";"); got != "state=closed 0;state=connecting 1;state=open 0" {
		t.Errorf("sluice_store_breaker_state = %q, want connecting", got)
	}
	for _, name := range []string{"sluice_instances", "sluice_store_local_denials_total", "sluice_store_overdue_total", "sluice_store_breaker_openings_total", "sluice_store_refund_errors_total", "sluice_store_script_runs_total", "sluice_store_script_keys_total"} {
		if fams[name] == nil {
			t.Errorf("%s is not exported for the failover store", name)
		}
	}
	if got := fams["sluice_store_duration_seconds"].GetMetric(); len(got) != 1 || got[0].GetLabel()[0].GetValue() != "failover" {
		t.Errorf("sluice_store_duration_seconds = %v, want store=failover", got)
	}
	// One shard while not connected: the whole store's, open, with the
	// decision made locally.
	for name, want := range map[string]string{
		"sluice_store_shard_breaker_open":           "shard=all 1",
		"sluice_store_shard_local_decisions_total":  "shard=all 1",
		"sluice_store_shard_breaker_openings_total": "shard=all 0",
	} {
		if got := strings.Join(series(fams[name]), ";"); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
}

func TestWatchers(t *testing.T) {
	m := New()
	buckets, denials := 7, int64(3)
	m.WatchBuckets(func() int { return buckets })
	m.WatchEvictions(func() uint64 { return 5 })
	m.WatchOverflows(func() uint64 { return 2 })
	m.WatchLocalDenials(func() int64 { return denials })
	m.WatchScriptRuns(func() (int64, int64) { return 4, 9 })
	st := rulestore.Status{}
	m.WatchRules(func() rulestore.Status { return st })
	value := func(name string) string {
		return strings.Join(series(gather(t, m)[name]), ";")
	}
	if got := value("sluice_store_buckets"); got != " 7" {
		t.Errorf("sluice_store_buckets = %q, want 7", got)
	}
	if got := value("sluice_store_evictions_total"); got != " 5" {
		t.Errorf("sluice_store_evictions_total = %q, want 5", got)
	}
	if got := value("sluice_store_overflows_total"); got != " 2" {
		t.Errorf("sluice_store_overflows_total = %q, want 2", got)
	}
	if got := value("sluice_store_local_denials_total"); got != " 3" {
		t.Errorf("sluice_store_local_denials_total = %q, want 3", got)
	}
	if r, k := value("sluice_store_script_runs_total"), value("sluice_store_script_keys_total"); r != " 4" || k != " 9" {
		t.Errorf("sluice_store_script_runs_total, _keys_total = %q, %q, want 4, 9", r, k)
	}
	if f, e := value("sluice_rules_load_failing"), value("sluice_rules_load_errors_total"); f != " 0" || e != " 0" {
		t.Errorf("healthy rules store: failing %q, errors %q, want 0, 0", f, e)
	}
	st = rulestore.Status{Error: "line 3: bad", ErrorAt: time.Unix(100, 0)}
	value("sluice_rules_load_failing") // a scrape sees the problem once...
	if f, e := value("sluice_rules_load_failing"), value("sluice_rules_load_errors_total"); f != " 1" || e != " 1" {
		t.Errorf("one problem, two scrapes: failing %q, errors %q, want 1, 1", f, e)
	}
	st = rulestore.Status{Error: "line 4: worse", ErrorAt: time.Unix(200, 0)}
	if e := value("sluice_rules_load_errors_total"); e != " 2" {
		t.Errorf("a second problem: errors %q, want 2", e)
	}
	if got := value("sluice_rules_database_refused"); got != " 0" {
		t.Errorf("a load problem: refused %q, want 0", got)
	}
	st = rulestore.Status{Error: "the rules database ... is another database", ErrorAt: time.Unix(300, 0), Refused: true}
	if f, r := value("sluice_rules_load_failing"), value("sluice_rules_database_refused"); f != " 1" || r != " 1" {
		t.Errorf("a refused database: failing %q, refused %q, want 1, 1", f, r)
	}
	st = rulestore.Status{}
	if f, e, r := value("sluice_rules_load_failing"), value("sluice_rules_load_errors_total"), value("sluice_rules_database_refused"); f != " 0" || e != " 3" || r != " 0" {
		t.Errorf("fixed: failing %q, errors %q, refused %q, want 0, 3, 0", f, e, r)
	}
}

// BenchmarkDecision is the cost metrics add to a decision: one counter and
// one histogram.
func BenchmarkDecision(b *testing.B) {
	ix := compile(b, &rules.Set{Rules: []rules.Rule{{ID: "a", Limit: 1, Window: rules.Duration(time.Second)}}})
	a, _ := ix.Rule("a")
	m := New()
	m.SetRules(ix)
	d := &limiter.Decision{Allowed: true, Rule: a}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Decision(d)
			m.Latency(APIGRPC, 20*time.Microsecond)
		}
	})
}
