package redis

import (
	"context"
	_ "embed"
	"encoding/binary"
	"fmt"
	"math"
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

// Reserve implements limiter.Reserver: reserve.lua, on the server's clock,
// finds the least wait after which every bucket admits the call and, when
// it is within maxWait, takes every bucket at that instant; atomic, as one
// script is. On a standalone server, reservations made at the same time
// share a run (never with checks), as checks do: each is still decided on
// its own, and those of one bucket in the order they were made. They are
// never decided by the local denial cache (a bucket that denies a check
// may still grant a slot). On a cluster each reservation is a run of its
// own, and every op must name the same client (ErrReserveClients).
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
	b := s.bufs.Get().(*callBuf)
	b.keys, b.params, b.maxWait = b.keys[:0], b.params[:0], maxWait
	for i := range ops {
		op := &ops[i]
		if !algorithm.CanReserve(op.Params.Kind) {
			s.bufs.Put(b)
			return limiter.TakeInfo{}, 0, fmt.Errorf("redis: op %d (client %q, rule %q): %w, not %s", i, op.Client, op.Rule, algorithm.ErrReserveKind, op.Params.Kind)
		}
		if s.cluster && op.Client != ops[0].Client {
			s.bufs.Put(b)
			return limiter.TakeInfo{}, 0, fmt.Errorf("%w: rule %q keys %q, rule %q keys %q", ErrReserveClients, ops[0].Rule, ops[0].Client, op.Rule, op.Client)
		}
		b.keys = append(b.keys, s.key(op.Client, op.Rule))
		b.params = appendParams(b.params, op, i == 0)
	}
	if s.rbatch != nil {
		if abandoned, err := s.rbatch.do(ctx, b); err != nil {
			if !abandoned { // else the run that carries it recycles it
				s.bufs.Put(b)
			}
			return limiter.TakeInfo{}, 0, err
		}
	} else {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], math.Float64bits(float64(maxWait)))
		reply, err := s.execReserve(ctx, b.keys, b.params, w[:])
		if err != nil {
			err = fmt.Errorf("redis: reserve: %w", err)
		} else if err = parseReserveRun(reply, []*callBuf{b}, len(b.keys)); err == nil {
			err = b.err
		}
		if err != nil {
			s.bufs.Put(b)
			return limiter.TakeInfo{}, 0, err
		}
	}
	copy(res, b.out[:n])
	info, wait := limiter.TakeInfo{Now: b.now}, b.wait
	s.bufs.Put(b)
	return info, wait, nil
}

// reserveRun runs reserve.lua over r and sets each call's now, wait, out
// and err.
func (s *Store) reserveRun(ctx context.Context, r *batchRun) {
	r.waits = r.waits[:0]
	for _, b := range r.calls {
		r.waits = binary.LittleEndian.AppendUint64(r.waits, math.Float64bits(float64(b.maxWait)))
	}
	reply, err := s.execReserve(ctx, r.keys, r.params, r.waits)
	if err != nil {
		err = fmt.Errorf("redis: reserve: %w", err)
	} else {
		err = parseReserveRun(reply, r.calls, len(r.keys))
	}
	if err != nil {
		for _, b := range r.calls {
			b.err = err
		}
	}
}

// parseReserveRun checks reserve.lua's reply for calls (keys keys in all)
// and sets each call's now, wait, out and err.
func parseReserveRun(reply string, calls []*callBuf, keys int) error {
	if len(reply) != 8+8*len(calls)+resultSize*keys {
		return fmt.Errorf("%w: reserve returned %d bytes for %d reservations of %d buckets", ErrReply, len(reply), len(calls), keys)
	}
	at, ok := exactInt(reply)
	at += epoch
	if !ok || at <= 0 || at > math.MaxInt64/1000 {
		return fmt.Errorf("%w: reserve returned time %q", ErrReply, reply[:8])
	}
	reply = reply[8:]
	for _, b := range calls {
		n := len(b.keys)
		wait, ok := exactInt(reply)
		b.now, b.wait = at, wait
		if !ok || wait < 0 || wait > b.maxWait {
			b.err = fmt.Errorf("%w: reserve returned wait %q", ErrReply, reply[:8])
		} else {
			b.err = parseResults(reply[8:8+n*resultSize], b.out[:n])
		}
		reply = reply[8+n*resultSize:]
	}
	return nil
}

// execReserve runs reserve.lua once, as exec runs take.lua. waits is
// ARGV[3].
func (s *Store) execReserve(ctx context.Context, keys []string, params, waits []byte) (string, error) {
	// Copies: when ctx ends first, the call returns while the command may
	// still wait to be written, and the buffers are reused.
	return s.run(ctx, reserveFunction, reserveScript, keys, []string{s.scriptNow(), string(params), string(waits)}, 0)
}
