package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/testkit/listentest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/internal/testkit/rlstest"
)

// An envoyproxy/ratelimit configuration written for this test: a fixed
// value, a key without a value (one bucket per value), a shadow_mode
// descriptor and nested descriptors.
const envoyReplay = `domain: replay
descriptors:
  - key: generic_key
    value: search
    rate_limit:
      unit: hour
      requests_per_unit: 3
  - key: tenant
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: trial
    shadow_mode: true
    rate_limit:
      unit: hour
      requests_per_unit: 1
  - key: client
    descriptors:
      - key: route
        value: login
        rate_limit:
          unit: hour
          requests_per_unit: 1
`

// entry is one descriptor of a step: its entries, and its hits_addend when
// set.
type entry struct {
	kv    []string
	hits  *uint64
	limit uint32 // the descriptor's own limit per minute, 0 for none
}

func hits(n uint64) *uint64 { return &n }

// wantStatus is what one descriptor's status must be. unit 0 with rpu 0:
// no current_limit. reset: the duration_until_reset is the rest of the
// unit's window (epoch-aligned, as envoyproxy/ratelimit counts) when
// true, else 0 (nothing taken from the bucket yet).
type wantStatus struct {
	code      rlsv3.RateLimitResponse_Code
	rpu       uint32
	unit      rlsv3.RateLimitResponse_RateLimit_Unit
	remaining uint32
	reset     bool
}

// TestEnvoyAPIReplay replays request sequences against the built binary's
// Envoy API, serving envoyproxy/ratelimit's configuration converted by
// `sluice rules import`, with --envoy-ratelimit-headers, on the embedded
// store and on Redis: per descriptor, its code, its own limit,
// limit_remaining and duration_until_reset; hits_addend 0 checking
// without taking; hits_addend past any limit; shadow_mode; nested
// descriptors; a descriptor no limit names; envoyproxy/ratelimit's
// RateLimit-* headers; and a descriptor's own limit (Envoy's dynamic
// limits). TestEnvoyImportedFeatures replays unlimited, replaces and
// requests_per_unit: 0.
func TestEnvoyAPIReplay(t *testing.T) {
	// Minute windows are aligned to the epoch: keep clear of their end.
	if s := time.Now().Second(); s >= 50 {
		time.Sleep(time.Duration(61-s) * time.Second)
	}
	dir := t.TempDir()
	rulesYAML := importEnvoy(t, dir, "replay.yaml", envoyReplay)
	t.Run("memory", func(t *testing.T) { replay(t, dir, rulesYAML, "memory") })
	t.Run("redis", func(t *testing.T) { replay(t, dir, rulesYAML, "redis", "--redis", redistest.Start(t).Addr()) })
}

func replay(t *testing.T, dir string, rulesYAML []byte, name string, extra ...string) {
	_, client := serveEnvoy(t, dir, name, rulesYAML, append([]string{"--envoy-ratelimit-headers"}, extra...)...)

	const (
		ok     = rlsv3.RateLimitResponse_OK
		over   = rlsv3.RateLimitResponse_OVER_LIMIT
		hour   = rlsv3.RateLimitResponse_RateLimit_HOUR
		minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
	)
	search := entry{kv: []string{"generic_key", "search"}}
	acme := entry{kv: []string{"tenant", "acme"}}
	steps := []struct {
		name    string
		ds      []entry
		overall rlsv3.RateLimitResponse_Code
		want    []wantStatus
		// RateLimit-Remaining, "" for no RateLimit-* header at all
		hdrRemaining string
	}{
		// One status per descriptor, each with its own limit.
		{"two limits 1", []entry{search, acme}, ok,
			[]wantStatus{{ok, 3, hour, 2, true}, {ok, 2, minute, 1, true}}, "1"},
		{"two limits 2", []entry{search, acme}, ok,
			[]wantStatus{{ok, 3, hour, 1, true}, {ok, 2, minute, 0, true}}, "0"},
		// tenant is used up: OVER_LIMIT, and (sluice) nothing taken from
		// search, whose status says what it holds.
		{"one over", []entry{search, acme}, over,
			[]wantStatus{{ok, 3, hour, 1, true}, {over, 2, minute, 0, true}}, "0"},
		{"nothing taken by the denial", []entry{search}, ok,
			[]wantStatus{{ok, 3, hour, 0, true}}, "0"},
		// hits_addend 0 checks without taking: OK with 0 remaining once
		// used up, as envoyproxy/ratelimit answers.
		{"check used up", []entry{{kv: search.kv, hits: hits(0)}}, ok,
			[]wantStatus{{ok, 3, hour, 0, true}}, "0"},
		{"check new", []entry{{kv: []string{"tenant", "newco"}, hits: hits(0)}}, ok,
			[]wantStatus{{ok, 2, minute, 2, false}}, "2"},
		{"check new again", []entry{{kv: []string{"tenant", "newco"}, hits: hits(0)}}, ok,
			[]wantStatus{{ok, 2, minute, 2, false}}, "2"},
		{"take after checks", []entry{{kv: []string{"tenant", "newco"}}}, ok,
			[]wantStatus{{ok, 2, minute, 1, true}}, "1"},
		{"check beside a take", []entry{{kv: []string{"tenant", "newco"}, hits: hits(0)}, {kv: []string{"tenant", "other"}}}, ok,
			[]wantStatus{{ok, 2, minute, 1, true}, {ok, 2, minute, 1, true}}, "1"},
		// A hits_addend past any limit decides: OVER_LIMIT, nothing taken.
		{"hits past any limit", []entry{{kv: []string{"tenant", "newco"}, hits: hits(5_000_000_000)}}, over,
			[]wantStatus{{over, 2, minute, 1, true}}, "1"},
		{"hits 2 over 1 left", []entry{{kv: []string{"tenant", "newco"}, hits: hits(2)}}, over,
			[]wantStatus{{over, 2, minute, 1, true}}, "1"},
		{"the last one", []entry{{kv: []string{"tenant", "newco"}}}, ok,
			[]wantStatus{{ok, 2, minute, 0, true}}, "0"},
		// shadow_mode: OK past its limit.
		{"shadow 1", []entry{{kv: []string{"trial", "t1"}}}, ok,
			[]wantStatus{{ok, 1, hour, 0, true}}, "0"},
		{"shadow 2", []entry{{kv: []string{"trial", "t1"}}}, ok,
			[]wantStatus{{ok, 1, hour, 0, true}}, "0"},
		// Nested descriptors: (client, <any>), (route, login); one bucket
		// per client.
		{"nested 1", []entry{{kv: []string{"client", "c1", "route", "login"}}}, ok,
			[]wantStatus{{ok, 1, hour, 0, true}}, "0"},
		{"nested 2", []entry{{kv: []string{"client", "c1", "route", "login"}}}, over,
			[]wantStatus{{over, 1, hour, 0, true}}, "0"},
		{"nested other client", []entry{{kv: []string{"client", "c2", "route", "login"}}}, ok,
			[]wantStatus{{ok, 1, hour, 0, true}}, "0"},
		// A descriptor's own limit: 1 a minute in place of tenant's 2, in
		// a bucket of its own.
		{"own limit 1", []entry{{kv: []string{"tenant", "dyn"}, limit: 1}}, ok,
			[]wantStatus{{ok, 1, minute, 0, true}}, "0"},
		{"own limit 2", []entry{{kv: []string{"tenant", "dyn"}, limit: 1}}, over,
			[]wantStatus{{over, 1, minute, 0, true}}, "0"},
		{"configured limit", []entry{{kv: []string{"tenant", "dyn"}}}, ok,
			[]wantStatus{{ok, 2, minute, 1, true}}, "1"},
		// No limit names these: OK without current_limit or headers.
		{"no limit", []entry{{kv: []string{"client", "c1", "route", "logout"}}, {kv: []string{"unknown", "x"}}}, ok,
			[]wantStatus{{code: ok}, {code: ok}}, ""},
	}
	for i, s := range steps {
		req := &rlsv3.RateLimitRequest{Domain: "replay"}
		for _, e := range s.ds {
			d := descriptor(e.kv...)
			if e.hits != nil {
				d.HitsAddend = wrapperspb.UInt64(*e.hits)
			}
			if e.limit != 0 {
				d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: e.limit, Unit: typev3.RateLimitUnit_MINUTE}
			}
			req.Descriptors = append(req.Descriptors, d)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := client.ShouldRateLimit(ctx, req)
		now := time.Now()
		cancel()
		if err != nil {
			t.Fatalf("step %d (%s): ShouldRateLimit = %v", i, s.name, err)
		}
		if resp.OverallCode != s.overall || len(resp.Statuses) != len(s.want) {
			t.Fatalf("step %d (%s): overall %v with %d statuses, want %v with %d", i, s.name, resp.OverallCode, len(resp.Statuses), s.overall, len(s.want))
		}
		for j, w := range s.want {
			st := resp.Statuses[j]
			lim := st.GetCurrentLimit()
			if st.Code != w.code || lim.GetRequestsPerUnit() != w.rpu || lim.GetUnit() != w.unit || st.LimitRemaining != w.remaining ||
				(w.rpu == 0) != (lim == nil) {
				t.Errorf("step %d (%s): status %d = %v, want %v, %d per %v, %d remaining", i, s.name, j, st, w.code, w.rpu, w.unit, w.remaining)
				continue
			}
			if lim == nil {
				if st.DurationUntilReset != nil {
					t.Errorf("step %d (%s): status %d without a limit has duration_until_reset %v", i, s.name, j, st.DurationUntilReset)
				}
				continue
			}
			got := st.GetDurationUntilReset().AsDuration()
			if !w.reset {
				if got != 0 {
					t.Errorf("step %d (%s): status %d duration_until_reset %v, want 0 (nothing taken)", i, s.name, j, got)
				}
				continue
			}
			unit := time.Minute
			if w.unit == hour {
				unit = time.Hour
			}
			// The rest of the unit's window at the answer, within the
			// time the call took.
			rest := now.Truncate(unit).Add(unit).Sub(now)
			if got <= 0 || got > unit || got < rest-time.Second || got > rest+time.Second {
				t.Errorf("step %d (%s): status %d duration_until_reset %v, want about %v (the rest of the %v)", i, s.name, j, got, rest, unit)
			}
		}
		h := map[string]string{}
		for _, hv := range resp.ResponseHeadersToAdd {
			h[hv.Key] = hv.Value
		}
		if got, has := h["RateLimit-Remaining"]; got != s.hdrRemaining || has != (s.hdrRemaining != "") ||
			has && (h["RateLimit-Limit"] == "" || h["RateLimit-Reset"] == "") {
			t.Errorf("step %d (%s): headers %v, want RateLimit-Remaining %q with RateLimit-Limit and RateLimit-Reset", i, s.name, h, s.hdrRemaining)
		}
	}
}

// importEnvoy writes config, an envoyproxy/ratelimit configuration, as name
// in a folder of dir and returns the rules `sluice rules import` makes of
// that folder.
func importEnvoy(t *testing.T, dir, name, config string) []byte {
	t.Helper()
	conf := filepath.Join(dir, "config")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(conf, name), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	rulesYAML, err := exec.Command(binary, "rules", "import", conf).Output()
	if err != nil {
		t.Fatalf("sluice rules import: %v", err)
	}
	return rulesYAML
}

// serveEnvoy writes rulesYAML as dir/rules-<name>.yaml and serves it with
// `sluice serve` (and extra) with the Envoy API on a free port, and returns
// the process and a client of that API.
func serveEnvoy(t *testing.T, dir, name string, rulesYAML []byte, extra ...string) (*instance, rlsv3.RateLimitServiceClient) {
	t.Helper()
	path := filepath.Join(dir, "rules-"+name+".yaml")
	if err := os.WriteFile(path, rulesYAML, 0o644); err != nil {
		t.Fatal(err)
	}
	addr := listentest.FreeAddr(t)
	in := serve(t, path, append(slices.Clip(extra), "--grpc-listen", addr)...)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return in, rlsv3.NewRateLimitServiceClient(conn)
}

// descriptor is a descriptor of the key-value pairs kv.
func descriptor(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// TestEnvoyImportedFeatures converts rlstest.Features with `sluice rules
// import`, serves it with `sluice serve` on Redis, and replays request
// sequences through the Envoy API: per descriptor the code, the limit and
// its name, limit_remaining and duration_until_reset, as
// envoyproxy/ratelimit answers them (docs/envoy.md).
func TestEnvoyImportedFeatures(t *testing.T) {
	// A fixed window of an hour is aligned to the hour: keep clear of it.
	if d := time.Until(time.Now().Truncate(time.Hour).Add(time.Hour)); d < time.Minute {
		time.Sleep(d + time.Second)
	}
	dir := t.TempDir()
	_, c := serveEnvoy(t, dir, "feat", importEnvoy(t, dir, "feat.yaml", rlstest.Features), "--redis", redistest.Start(t).Addr())
	const ok, over = rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	type want = rlstest.Status
	none, unl, lim := rlstest.NoLimit, rlstest.Unlimited, rlstest.Limited
	d := func(ds ...*ratelimitv3.RateLimitDescriptor) []*ratelimitv3.RateLimitDescriptor { return ds }
	north, south := descriptor("area", "north", "member", "kim"), descriptor("area", "south", "member", "kim")
	steps := []struct {
		name string
		ds   []*ratelimitv3.RateLimitDescriptor
		want []want
	}{
		{"unlimited", d(descriptor("client", "internal")), []want{unl}},
		{"unlimited again", d(descriptor("client", "internal")), []want{unl}},
		{"unlimited next to its key", d(descriptor("client", "internal"), descriptor("client", "acme")), []want{unl, lim(ok, 3, 2, "")}},
		{"no rate_limit: the key's limit does not apply", d(descriptor("client", "trusted")), []want{unl}},
		{"requests_per_unit 0", d(descriptor("client", "banned")), []want{lim(over, 0, 0, "")}},
		{"requests_per_unit 0 denies the request, takes nothing", d(descriptor("client", "acme"), descriptor("client", "banned")),
			[]want{lim(ok, 3, 2, ""), lim(over, 0, 0, "")}},
		{"acme kept its call", d(descriptor("client", "acme")), []want{lim(ok, 3, 1, "")}},
		{"a named limit", d(north), []want{lim(ok, 2, 1, "member_north")}},
		{"replaced across descriptors", d(north, south), []want{none, lim(ok, 4, 3, "")}},
		{"replaced by an unlimited descriptor", d(descriptor("vip", "v"), north), []want{unl, none}},
		{"the replaced limit was not counted", d(north), []want{lim(ok, 2, 0, "member_north")}},
		{"then over", d(north), []want{lim(over, 2, 0, "member_north")}},
	}
	for i, s := range steps {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "feat", Descriptors: s.ds})
		cancel()
		if err != nil {
			t.Fatalf("step %d (%s): %v", i, s.name, err)
		}
		rlstest.CheckFeatures(t, fmt.Sprintf("step %d (%s)", i, s.name), resp, s.want)
	}
}
