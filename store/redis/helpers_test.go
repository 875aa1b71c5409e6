package redis_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/redistest"
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
	s, err := sredis.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
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
	command string // Store.ScriptCommand
	evalsha bool   // Config.Evalsha
}{{"FCALL", false}, {"EVALSHA", true}}

// checkPath fails the test unless s runs take.lua with command.
func checkPath(t testing.TB, s *sredis.Store, command string) {
	t.Helper()
	if got := s.ScriptCommand(); got != command {
		t.Fatalf("store runs take.lua with %s, want %s", got, command)
	}
}

// commandCalls returns cmdstat_<name>'s calls from INFO commandstats.
func commandCalls(t testing.TB, srv *redistest.Server, name string) int64 {
	t.Helper()
	for _, line := range strings.Split(do(t, srv, "info", "commandstats"), "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":calls=")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(rest[:strings.IndexByte(rest+",", ',')], 10, 64)
		if err != nil {
			t.Fatalf("INFO commandstats: %q: %v", line, err)
		}
		return n
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
