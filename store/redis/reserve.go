package redis

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/limiter"
)

var (
	//go:embed reserve.lua
	reserveBody string

	// reserve.lua runs take.lua's algorithms, evaluated at the instants it
	// chooses. As a script (EVALSHA): codec.lua, take.lua up to its
	// evaluation part, reserve.lua, and a run of reserve; in the function
	// library (FCALL, redis.go) it follows the whole of take.lua.
	reserveSource = codecSource + takeBody[:strings.Index(takeBody, takeEvalMarker)] + reserveBody +
		"\nreturn reserve(KEYS, ARGV)\n"

	reserveScript = rueidis.NewLuaScript(reserveSource)
)

// takeEvalMarker starts the part of take.lua that evaluates a run; what
// precedes it (the clock and the algorithms) reserve.lua shares.
const takeEvalMarker = "-- evaluate every call --"

// ErrReserveClients: on a Redis Cluster, a reservation's rules must all be
// keyed by one client, whose buckets live on one shard.
// It wraps limiter.ErrReserveUnsupported.
var ErrReserveClients = fmt.Errorf("%w: on a Redis Cluster a reservation's rules must all be keyed by the same client (user, api_key or ip)", limiter.ErrReserveUnsupported)

var _ limiter.Reserver = (*Store)(nil)

// ReserveCommand is the command that runs reserve.lua: "FCALL" (in the
// function library with take.lua, Redis 7 and later) or "EVALSHA", as
// ScriptCommand.
func (s *Store) ReserveCommand() string { return s.ScriptCommand() }

// Reserve implements limiter.Reserver: one run of reserve.lua, on the
// server's clock, finds the least wait after which every bucket admits the
// call and, when it is within maxWait, takes every bucket at that instant;
// atomic, as one script is. Reservations are never batched with other
// calls, and never decided by the local denial cache (a bucket that denies
// a check may still grant a slot). On a cluster every op must name the same
// client (ErrReserveClients).
func (s *Store) Reserve(ctx context.Context, ops []limiter.Op, res []algorithm.Result, maxWait int64) (limiter.TakeInfo, int64, error) {
	n := len(ops)
	if n > limiter.MaxRulesPerCall {
		return limiter.TakeInfo{}, 0, limiter.ErrTooManyRules
	}
	if len(res) < n {
		return limiter.TakeInfo{}, 0, fmt.Errorf("redis: len(res) = %d, want at least len(ops) = %d", len(res), n)
	}
	if n == 0 {
		return limiter.TakeInfo{}, 0, nil
	}
	if maxWait < 0 {
		maxWait = 0
	}
	keys := make([]string, n)
	params := make([]byte, 0, 34*n)
	for i := range ops {
		op := &ops[i]
		if !algorithm.CanReserve(op.Params.Kind) {
			return limiter.TakeInfo{}, 0, fmt.Errorf("redis: op %d (client %q, rule %q): %w, not %s", i, op.Client, op.Rule, algorithm.ErrReserveKind, op.Params.Kind)
		}
		if s.cluster && op.Client != ops[0].Client {
			return limiter.TakeInfo{}, 0, fmt.Errorf("%w: rule %q keys %q, rule %q keys %q", ErrReserveClients, ops[0].Rule, ops[0].Client, op.Rule, op.Client)
		}
		keys[i] = s.Key(op.Client, op.Rule)
		params = appendParams(params, op, i == 0)
	}
	now := ""
	if s.cfg.Clock != nil {
		now = strconv.FormatInt(s.cfg.Clock()-epoch, 10)
	}
	reply, err := s.execReserve(ctx, keys, []string{now, string(params), strconv.FormatInt(maxWait, 10)})
	if err != nil {
		return limiter.TakeInfo{}, 0, fmt.Errorf("redis: reserve: %w", err)
	}
	if len(reply) != 16+resultSize*n {
		return limiter.TakeInfo{}, 0, fmt.Errorf("%w: reserve returned %d bytes for %d buckets", ErrReply, len(reply), n)
	}
	at, ok1 := exactInt(reply)
	wait, ok2 := exactInt(reply[8:])
	at += epoch
	if !ok1 || !ok2 || at <= 0 || wait < 0 || wait > maxWait {
		return limiter.TakeInfo{}, 0, fmt.Errorf("%w: reserve returned time %q and wait %q", ErrReply, reply[:8], reply[8:16])
	}
	if err := parseResults(reply[16:], res[:n]); err != nil {
		return limiter.TakeInfo{}, 0, err
	}
	return limiter.TakeInfo{Now: at}, wait, nil
}

// execReserve runs reserve.lua once, as exec runs take.lua: by FCALL when
// the store has the function library, loading it again once if a node
// lost it, else EVALSHA (EVAL on NOSCRIPT).
func (s *Store) execReserve(ctx context.Context, keys, args []string) (string, error) {
	if s.fcall {
		for try := 0; try < 2; try++ {
			r := s.client.Do(ctx, s.client.B().Fcall().Function(reserveFunction).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
			if !functionNotFound(r.Error()) {
				return r.ToString()
			}
			if try == 0 {
				s.loadLibrary(ctx)
			}
		}
	}
	return reserveScript.Exec(ctx, s.client, keys, args).ToString()
}
