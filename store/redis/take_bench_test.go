package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/algorithm/conformance"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/limiter"
)

// scriptMicros is the mean time Redis spent in one run of take.lua (FCALL
// or EVALSHA, by command) since the last CONFIG RESETSTAT (INFO
// commandstats usec_per_call): the script's own cost, without the round
// trip.
func scriptMicros(b *testing.B, srv *redistest.Server, command string) float64 {
	prefix := "cmdstat_" + strings.ToLower(command) + ":"
	for _, line := range strings.Split(do(b, srv, "info", "commandstats"), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			for _, f := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
					x, _ := strconv.ParseFloat(v, 64)
					return x
				}
			}
		}
	}
	return 0
}

// BenchmarkTake measures one decision through take.lua on a real
// redis-server, per path (FCALL of the function library, EVALSHA) and
// algorithm, one call at a time (no batching), on a warm bucket of 100
// calls a second that alternates between allowed and denied.
func BenchmarkTake(b *testing.B) {
	srv := redistest.Start(b)
	for _, path := range scriptPaths {
		var clock atomic.Int64
		s := newStorePath(b, &clock, path.evalsha, srv.Addr())
		checkPath(b, s, path.command)
		for _, k := range algorithm.Kinds {
			b.Run(path.command+"/"+k.String(), func(b *testing.B) {
				ops := []limiter.Op{{Client: "user:bench", Rule: fmt.Sprint(k), Params: algorithm.Params{Kind: k, Limit: 100, Window: conformance.Second}, Cost: 1}}
				res := make([]algorithm.Result, 1)
				benchCalls(b, srv, &clock, path.command, func() error {
					_, err := s.Take(context.Background(), ops, res)
					return err
				})
			})
		}
	}
}
