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

// scriptCalls returns how many EVALSHA and EVAL commands srv has run
// (INFO commandstats).
func scriptCalls(t testing.TB, srv *redistest.Server) (evalsha, eval int64) {
	t.Helper()
	return commandCalls(t, srv, "evalsha"), commandCalls(t, srv, "eval")
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
