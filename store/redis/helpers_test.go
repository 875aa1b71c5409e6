package redis_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/seam/redisstore"
	"github.com/sluicehq/sluice/internal/testkit/conformance"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/limiter"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// openStore connects a Store to addrs with DefaultConfig changed by edit.
func openStore(t testing.TB, edit func(*sredis.Config), addrs ...string) *sredis.Store {
	t.Helper()
	cfg := sredis.DefaultConfig()
	cfg.Addrs = addrs
	if edit != nil {
		edit(&cfg)
	}
	s, err := sredis.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// openClocked connects a Store to addrs without the denial cache, on a
// test clock that starts half an hour after conformance.Base (clear of the
// end of a window), with DefaultConfig further changed by edit (nil: none).
func openClocked(t testing.TB, edit func(*sredis.Config), addrs ...string) (*atomic.Int64, *sredis.Store) {
	t.Helper()
	clock := new(atomic.Int64)
	clock.Store(conformance.Base + 30*conformance.Minute)
	return clock, openStore(t, func(c *sredis.Config) {
		c.Clock, c.NoDenialCache = clock.Load, true
		if edit != nil {
			edit(c)
		}
	}, addrs...)
}

// take runs one call and returns its results.
func take(t testing.TB, s *sredis.Store, ops ...limiter.Op) ([]algorithm.Result, limiter.TakeInfo) {
	t.Helper()
	res := make([]algorithm.Result, len(ops))
	info, err := s.Take(context.Background(), ops, res)
	if err != nil {
		t.Fatalf("Take(%+v): %v", ops, err)
	}
	return res, info
}

// do runs a redis-cli command on srv and fails the test on error.
func do(t testing.TB, srv *redistest.Server, args ...string) string {
	t.Helper()
	out, err := srv.Do(args...)
	if err != nil {
		t.Fatalf("redis-cli %s on %s: %v: %s", strings.Join(args, " "), srv.Addr(), err, out)
	}
	return out
}

// scriptCalls returns how many runs of a loaded script srv has made (FCALL
// and EVALSHA commands) and how many EVAL commands (INFO commandstats).
func scriptCalls(t testing.TB, srv *redistest.Server) (loaded, eval int64) {
	t.Helper()
	return commandCalls(t, srv, "fcall") + commandCalls(t, srv, "evalsha"), commandCalls(t, srv, "eval")
}

// scriptPaths are the two ways the store runs take.lua: a function library
// called with FCALL (Redis 7 and later, the default) and EVALSHA (older
// servers; Config.Evalsha forces it). The tests of the scripts' decisions
// run on both.
var scriptPaths = []struct {
	command string // redisstore.Command
	evalsha bool   // Config.Evalsha
}{{"FCALL", false}, {"EVALSHA", true}}

// checkPath fails the test unless s runs take.lua with command.
func checkPath(t testing.TB, s *sredis.Store, command string) {
	t.Helper()
	if got := redisstore.Command(s); got != command {
		t.Fatalf("store runs take.lua with %s, want %s", got, command)
	}
}

// commandCalls returns cmdstat_<name>'s calls from INFO commandstats.
func commandCalls(t testing.TB, srv *redistest.Server, name string) int64 {
	t.Helper()
	return int64(commandStat(t, srv, name, "calls"))
}

// scriptMicros is the mean time Redis spent in one run of take.lua (FCALL
// or EVALSHA, by command) since the last CONFIG RESETSTAT (INFO
// commandstats usec_per_call): the script's own cost, without the round
// trip.
func scriptMicros(t testing.TB, srv *redistest.Server, command string) float64 {
	t.Helper()
	return commandStat(t, srv, strings.ToLower(command), "usec_per_call")
}

// scriptUsec is the usec Redis spent in scripts and functions so far.
func scriptUsec(t testing.TB, srv *redistest.Server) int64 {
	t.Helper()
	var sum int64
	for _, c := range []string{"evalsha", "eval", "fcall"} {
		sum += int64(commandStat(t, srv, c, "usec"))
	}
	return sum
}

// commandStat returns field (calls, usec, usec_per_call) of
// cmdstat_<name> in INFO commandstats, 0 while srv has not run name.
func commandStat(t testing.TB, srv *redistest.Server, name, field string) float64 {
	t.Helper()
	for _, line := range strings.Split(do(t, srv, "info", "commandstats"), "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":")
		if !ok {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, field+"="); ok {
				x, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("INFO commandstats: %q: %v", line, err)
				}
				return x
			}
		}
	}
	return 0
}

// infoField returns field of an INFO section of srv.
func infoField(t testing.TB, srv *redistest.Server, section, field string) string {
	t.Helper()
	for _, line := range strings.Split(do(t, srv, "info", section), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	t.Fatalf("INFO %s has no %s", section, field)
	return ""
}

// paramsOf returns the params of a rule of kind with limit calls per window.
func paramsOf(k algorithm.Kind, limit, window int64) algorithm.Params {
	return algorithm.Params{Kind: k, Limit: limit, Window: window}
}

// takeConcurrently runs goroutines goroutines at once, goroutine g making
// rounds calls of ops(g), fails the test on any error and returns how many
// calls had every result allowed.
func takeConcurrently(t testing.TB, s *sredis.Store, goroutines, rounds int, ops func(g int) []limiter.Op) int64 {
	t.Helper()
	var allowed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			o := ops(g)
			res := make([]algorithm.Result, len(o))
			for range rounds {
				if _, err := s.Take(context.Background(), o, res); err != nil {
					errs <- err
					return
				}
				all := true
				for _, r := range res {
					all = all && r.Allowed
				}
				if all {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return allowed.Load()
}

// startPathStore starts a redis-server and connects a Store with a test
// clock to it, with Config.Evalsha set to evalsha, and fails the test unless
// the store runs take.lua with command.
func startPathStore(t testing.TB, evalsha bool, command string) (*atomic.Int64, *sredis.Store) {
	t.Helper()
	srv := redistest.Start(t)
	clock := new(atomic.Int64)
	s := newStorePath(t, clock, evalsha, srv.Addr())
	checkPath(t, s, command)
	return clock, s
}

// benchCalls runs call b.N times, the clock moving 7 ms before each from
// conformance.Base, and reports the mean time the server spent in command
// per call.
func benchCalls(b *testing.B, srv *redistest.Server, clock *atomic.Int64, command string, call func() error) {
	b.Helper()
	now := conformance.Base
	do(b, srv, "config", "resetstat")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now += 7 * conformance.Millisecond
		clock.Store(now)
		if err := call(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(scriptMicros(b, srv, command), "redis-µs/call")
}

// checkReloaded fails the test unless, after a FUNCTION FLUSH, srv lists a
// library named prefix… again and has run fcalls FCALL commands since it
// counted fcall0 (why says which) and no EVAL since eval0.
func checkReloaded(t testing.TB, srv *redistest.Server, prefix string, fcall0, eval0, fcalls int64, why string) {
	t.Helper()
	if got := do(t, srv, "function", "list"); !strings.Contains(got, prefix) {
		t.Fatalf("FUNCTION LIST after the calls = %q, want the library %s… loaded again", got, prefix)
	}
	if n := commandCalls(t, srv, "fcall") - fcall0; n != fcalls {
		t.Fatalf("FCALL commands after FUNCTION FLUSH = %d, want %d (%s)", n, fcalls, why)
	}
	if n := commandCalls(t, srv, "eval") - eval0; n != 0 {
		t.Fatalf("EVAL calls after FUNCTION FLUSH = %d, want 0", n)
	}
}

// startStore starts a redis-server and connects a Store to it whose test
// clock stands still at conformance.Base.
func startStore(t testing.TB) (*redistest.Server, *sredis.Store) {
	t.Helper()
	srv := redistest.Start(t)
	clock := new(atomic.Int64)
	clock.Store(conformance.Base)
	return srv, newStore(t, clock, srv.Addr())
}
