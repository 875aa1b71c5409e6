package redis

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/seam/everyresult"
	"github.com/sluicehq/sluice/limiter"
)

// callBuf is the per-call working memory; on a standalone server it is also
// the call's place in a batch (see batcher).
type callBuf struct {
	groups [limiter.MaxRulesPerCall]group

	// The whole call as one script call: standalone servers.
	keys   []string
	params []byte // take.lua's ARGV[2]
	out    [limiter.MaxRulesPerCall]algorithm.Result
	now    int64
	err    error
	// A reservation: its max wait and the wait granted (µs).
	maxWait, wait int64
	// Batching: state is callWaiting until the run that carries the call
	// answers (callDone, then done receives) or the caller gives up
	// (callAbandoned: the run recycles the buffer).
	state    atomic.Int32
	done     chan struct{}
	deadline time.Time // zero: none
}

type group struct {
	client string
	ops    []int // indexes into the call's ops
	keys   []string
	params []byte
	now    int64
	took   bool // the script consumed (no non-shadow op of this group denied)
	err    error
	fresh  bool // not run yet (runGroups)
}

// Take implements limiter.Store. On a standalone server the call is one
// script run, shared with other calls made at the same time. On a cluster
// it is one script per client, all in one round trip; a cross-shard denial
// gives back what other shards took.
//
// A hot bucket's op (see leases) is decided from a lease of its tokens
// held by this instance, without a round trip.
func (s *Store) Take(ctx context.Context, ops []limiter.Op, res []algorithm.Result) (limiter.TakeInfo, error) {
	if len(ops) > limiter.MaxRulesPerCall {
		return limiter.TakeInfo{}, limiter.ErrTooManyRules
	}
	if s.leases != nil && !everyresult.Wanted(ctx) {
		return s.takeLeased(ctx, ops, res)
	}
	return s.takeRemote(ctx, ops, res)
}

// takeRemote decides ops in Redis (or from the denial cache).
func (s *Store) takeRemote(ctx context.Context, ops []limiter.Op, res []algorithm.Result) (limiter.TakeInfo, error) {
	sent := s.cfg.Now()
	if s.deny != nil {
		if info, ok := s.deny.DenyLocally(ops, res, sent); ok {
			if !everyresult.Wanted(ctx) {
				return info, nil
			}
			// A cached denial reads no other bucket of the call, and the
			// caller wants every op's result (everyresult.With):
			// Redis decides, and the cache did not.
			s.deny.hits.Add(-1)
		}
	}
	b := s.bufs.Get().(*callBuf)
	var now int64
	var err error
	if s.cluster {
		now, err = s.takeCluster(ctx, b, ops, res)
		s.bufs.Put(b)
	} else {
		var abandoned bool
		now, abandoned, err = s.takeStandalone(ctx, b, ops, res)
		if !abandoned { // else the run that carries it recycles it
			s.bufs.Put(b)
		}
	}
	if err != nil {
		return limiter.TakeInfo{}, err
	}
	if s.deny != nil {
		s.deny.remember(ops, res, sent, now)
	}
	return limiter.TakeInfo{Now: now}, nil
}

// takeStandalone decides the call in one script run: all its ops are one
// call of take.lua, all or nothing.
func (s *Store) takeStandalone(ctx context.Context, b *callBuf, ops []limiter.Op, res []algorithm.Result) (now int64, abandoned bool, err error) {
	b.keys = b.keys[:0]
	b.params = b.params[:0]
	for i := range ops {
		op := &ops[i]
		b.keys = append(b.keys, s.key(op.Client, op.Rule))
		b.params = appendParams(b.params, op, i == 0)
	}
	if s.batch != nil {
		if abandoned, err = s.batch.do(ctx, b); err != nil {
			return 0, abandoned, err
		}
	} else {
		reply, err := s.exec(ctx, b.keys, b.params, 0)
		if err != nil {
			return 0, false, fmt.Errorf("redis: take: %w", err)
		}
		if err := checkReply(reply, len(ops)); err != nil {
			return 0, false, err
		}
		b.now, b.err = replyNow(reply), parseResults(reply[8:], b.out[:len(ops)])
		if b.err != nil {
			return 0, false, b.err
		}
	}
	copy(res, b.out[:len(ops)])
	return b.now, false, nil
}

// takeCluster runs one script per client, in parallel, and gives back what
// was taken when a client's script denied or failed.
//
// A client's script of several keys that its slot's move keeps answering
// TRYAGAIN (some keys moved, or new, while others are not: the target of
// the move refuses a script of keys it does not all hold until the move
// ends) is run again one key at a time, as clients on different shards
// are: each key is on one node or the other, and what was taken is given
// back when a key denies. The call stays all or nothing, decided by Redis.
func (s *Store) takeCluster(ctx context.Context, b *callBuf, ops []limiter.Op, res []algorithm.Result) (int64, error) {
	gs := s.group(b, ops)
	s.runGroups(ctx, gs, ops, res)
	if slices.ContainsFunc(gs, func(g group) bool { return len(g.ops) >= 2 && tryAgain(g.err) }) {
		// made only here: an array on the stack would escape to the heap
		// on every call
		split := make([]group, 0, len(ops))
		for _, g := range gs {
			if len(g.ops) < 2 || !tryAgain(g.err) {
				split = append(split, g)
				continue
			}
			for _, i := range g.ops {
				split = append(split, group{client: g.client, ops: []int{i}, fresh: true})
			}
		}
		gs = split
		s.runGroups(ctx, gs, ops, res)
	}

	var firstErr error
	vetoed := false
	var latest int64
	for gi := range gs {
		g := &gs[gi]
		if g.err != nil {
			if firstErr == nil {
				firstErr = g.err
			}
			continue
		}
		if !g.took {
			vetoed = true
		}
		if g.now > latest {
			latest = g.now
		}
	}
	if len(gs) > 1 && (vetoed || firstErr != nil) {
		// Another shard denied (or failed): give back what was taken.
		s.giveBack(ctx, gs, ops, res)
	}
	return latest, firstErr
}

// splitAfter is how many times a cluster script of several keys answered
// TRYAGAIN is tried again (over about 15 ms, see run) before its keys are
// run one at a time: a slot's keys move in batches that take milliseconds,
// so most calls find them all on one node again.
const splitAfter = 4

// runGroups runs take.lua for the groups of gs not yet run (fresh), in
// parallel.
func (s *Store) runGroups(ctx context.Context, gs []group, ops []limiter.Op, res []algorithm.Result) {
	var wg sync.WaitGroup
	for gi := range gs {
		g := &gs[gi]
		if !g.fresh {
			continue
		}
		g.fresh = false
		g.keys = g.keys[:0]
		g.params = g.params[:0]
		for k, i := range g.ops {
			op := &ops[i]
			g.keys = append(g.keys, s.key(op.Client, op.Rule))
			g.params = appendParams(g.params, op, k == 0)
		}
		if len(gs) == 1 {
			g.err = s.runTake(ctx, g, ops, res)
			return
		}
		wg.Add(1)
		go func(g *group) {
			defer wg.Done()
			g.err = s.runTake(ctx, g, ops, res)
		}(g)
	}
	wg.Wait()
}

// group splits ops by client, keeping their order.
func (s *Store) group(b *callBuf, ops []limiter.Op) []group {
	n := 0
	for i := range ops {
		gi := -1
		for j := 0; j < n; j++ {
			if b.groups[j].client == ops[i].Client {
				gi = j
				break
			}
		}
		if gi < 0 {
			gi = n
			n++
			g := &b.groups[gi]
			g.client, g.ops, g.took, g.err, g.now, g.fresh = ops[i].Client, g.ops[:0], false, nil, 0, true
		}
		b.groups[gi].ops = append(b.groups[gi].ops, i)
	}
	return b.groups[:n]
}

// runTake runs take.lua for one group and fills its results.
func (s *Store) runTake(ctx context.Context, g *group, ops []limiter.Op, res []algorithm.Result) error {
	tries := 0
	if len(g.keys) > 1 {
		tries = splitAfter
	}
	reply, err := s.exec(ctx, g.keys, g.params, tries)
	if err != nil {
		return fmt.Errorf("redis: take for %s: %w", g.client, err)
	}
	if err := checkReply(reply, len(g.ops)); err != nil {
		return err
	}
	var out [limiter.MaxRulesPerCall]algorithm.Result
	if err := parseResults(reply[8:], out[:len(g.ops)]); err != nil {
		return err
	}
	g.now = replyNow(reply)
	g.took = true
	for k, i := range g.ops {
		res[i] = out[k]
		if !out[k].Allowed && !ops[i].Shadow {
			g.took = false
		}
	}
	return nil
}
