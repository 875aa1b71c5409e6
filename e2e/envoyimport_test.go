package e2e

import (
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/redistest"
)

// An envoyproxy/ratelimit configuration written for this test, with
// unlimited, requests_per_unit 0, a descriptor without rate_limit next to
// its key, and name/replaces (also from an unlimited descriptor).
const envoyFeatures = `domain: feat
descriptors:
  - key: client
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: client
    value: internal
    rate_limit: {unlimited: true}
  - key: client
    value: trusted
  - key: client
    value: banned
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: area
    value: north
    descriptors:
      - key: member
        rate_limit: {name: member_north, unit: hour, requests_per_unit: 2}
  - key: area
    value: south
    descriptors:
      - key: member
        rate_limit:
          replaces: [{name: member_north}]
          unit: hour
          requests_per_unit: 4
  - key: vip
    rate_limit:
      unlimited: true
      replaces: [{name: member_north}]
`

// TestEnvoyImportedFeatures converts envoyFeatures with `sluice rules
// import`, serves it with `sluice serve` on Redis, and replays request
// sequences through the Envoy API: per descriptor the code, the limit and
// its name, limit_remaining and duration_until_reset, as
// envoyproxy/ratelimit answers them (docs/envoy.md).
func TestEnvoyImportedFeatures(t *testing.T) {
	// A fixed window of an hour is aligned to the hour: keep clear of it.
	if d := time.Until(time.Now().Truncate(time.Hour).Add(time.Hour)); d < time.Minute {
		time.Sleep(d + time.Second)
	}
	srv := redistest.Start(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "feat.yaml")
	if err := os.WriteFile(conf, []byte(envoyFeatures), 0o644); err != nil {
		t.Fatal(err)
	}
	rulesYAML, err := exec.Command(binary, "rules", "import", conf).Output()
	if err != nil {
		t.Fatalf("sluice rules import: %v", err)
	}
	path := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(path, rulesYAML, 0o644); err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	serve(t, path, "--redis", srv.Addr(), "--grpc-listen", addr)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := rlsv3.NewRateLimitServiceClient(conn)

	desc := func(kv ...string) *ratelimitv3.RateLimitDescriptor {
		d := &ratelimitv3.RateLimitDescriptor{}
		for i := 0; i < len(kv); i += 2 {
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		return d
	}
	const ok, over = rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	type want struct {
		code      rlsv3.RateLimitResponse_Code
		limited   bool // a current_limit
		limit     uint32
		remaining uint32
		name      string
	}
	none, unl := want{code: ok}, want{code: ok, remaining: math.MaxUint32}
	d := func(ds ...*ratelimitv3.RateLimitDescriptor) []*ratelimitv3.RateLimitDescriptor { return ds }
	north, south := desc("area", "north", "member", "kim"), desc("area", "south", "member", "kim")
	steps := []struct {
		name string
		ds   []*ratelimitv3.RateLimitDescriptor
		want []want
	}{
		{"unlimited", d(desc("client", "internal")), []want{unl}},
		{"unlimited again", d(desc("client", "internal")), []want{unl}},
		{"unlimited next to its key", d(desc("client", "internal"), desc("client", "acme")), []want{unl, {ok, true, 3, 2, "feat.1"}}},
		{"no rate_limit: the key's limit does not apply", d(desc("client", "trusted")), []want{unl}},
		{"requests_per_unit 0", d(desc("client", "banned")), []want{{over, true, 0, 0, "feat.4"}}},
		{"requests_per_unit 0 denies the request, takes nothing", d(desc("client", "acme"), desc("client", "banned")),
			[]want{{ok, true, 3, 1, "feat.1"}, {over, true, 0, 0, "feat.4"}}},
		{"acme kept its call", d(desc("client", "acme")), []want{{ok, true, 3, 1, "feat.1"}}},
		{"a named limit", d(north), []want{{ok, true, 2, 1, "member_north"}}},
		{"replaced across descriptors", d(north, south), []want{none, {ok, true, 4, 3, "feat.6"}}},
		{"replaced by an unlimited descriptor", d(desc("vip", "v"), north), []want{unl, none}},
		{"the replaced limit was not counted", d(north), []want{{ok, true, 2, 0, "member_north"}}},
		{"then over", d(north), []want{{over, true, 2, 0, "member_north"}}},
	}
	for i, s := range steps {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "feat", Descriptors: s.ds})
		cancel()
		if err != nil {
			t.Fatalf("step %d (%s): %v", i, s.name, err)
		}
		overall := ok
		for j, w := range s.want {
			if w.code == over {
				overall = over
			}
			st := resp.Statuses[j]
			cl := st.GetCurrentLimit()
			got := want{st.Code, cl != nil, cl.GetRequestsPerUnit(), st.LimitRemaining, cl.GetName()}
			if got != w {
				t.Errorf("step %d (%s), descriptor %d: %+v, want %+v", i, s.name, j, got, w)
			}
			reset := st.GetDurationUntilReset().AsDuration()
			switch {
			case cl == nil && st.DurationUntilReset != nil:
				t.Errorf("step %d (%s), descriptor %d: duration_until_reset %v without a limit", i, s.name, j, reset)
			case cl != nil && (cl.Unit != rlsv3.RateLimitResponse_RateLimit_HOUR || reset <= 0 || reset > time.Hour):
				t.Errorf("step %d (%s), descriptor %d: unit %v, duration_until_reset %v, want HOUR and (0, 1h]", i, s.name, j, cl.Unit, reset)
			}
		}
		if resp.OverallCode != overall {
			t.Errorf("step %d (%s): overall %v, want %v", i, s.name, resp.OverallCode, overall)
		}
	}
}
