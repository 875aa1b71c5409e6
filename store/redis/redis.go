// Package redis keeps bucket state in Redis or a Redis Cluster, shared by
// every sluice instance: one atomic Lua script per client per call.
//
// Keys are rl:{<client>}:<rule-id>. The braces are a Redis Cluster hash tag,
// so all of one client's buckets live on one shard and are checked and taken
// by one script, all or nothing. A call whose rules key different clients
// (a per-user and a per-ip rule) runs one script per client, in one
// pipelined round trip, and gives back what it took when another shard
// denied (refund.lua).
//
// Time comes from the server (Redis TIME inside the script), never from the
// gateways' clocks.
package redis

import (
	"context"
	"crypto/tls"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/limiter"
)

var (
	//go:embed take.lua
	takeSource string
	//go:embed refund.lua
	refundSource string
)

// Errors of the Redis store.
var (
	// ErrReply: Redis answered with a reply of the wrong shape.
	ErrReply = errors.New("redis: unexpected reply")
)

// Config configures a Store. Use DefaultConfig and set Addrs.
type Config struct {
	// Addrs are host:port seeds. One address of a standalone server, or any
	// nodes of a cluster: a cluster is detected automatically.
	Addrs []string
	// Username and Password authenticate (ACL user, or password only).
	Username, Password string
	// TLS, when set, connects with TLS.
	TLS *tls.Config
	// DialTimeout bounds connecting to a node. Default 2s: long enough for
	// a loaded server, short enough that a dead address fails fast at start.
	DialTimeout time.Duration
	// KeyPrefix starts every key. Default "rl:".
	KeyPrefix string
	// DenialCache enables the exact local denial cache (see denialCache).
	// Default true.
	DenialCache bool
	// Clock, when set, passes its reading (Unix µs) to the scripts instead of
	// the server's TIME. For deterministic tests only.
	Clock func() int64
}

// DefaultConfig returns the defaults, without addresses.
func DefaultConfig() Config {
	return Config{DialTimeout: 2 * time.Second, KeyPrefix: "rl:", DenialCache: true}
}

// Store is the shared counter store. Safe for concurrent use; use New.
type Store struct {
	cfg    Config
	client rueidis.Client
	take   *rueidis.Lua
	refund *rueidis.Lua
	deny   *denialCache
	bufs   sync.Pool
}

var _ limiter.Store = (*Store)(nil)

// New connects to the Redis server or cluster at cfg.Addrs. It fails, within
// DialTimeout, with an error naming the addresses and what went wrong.
func New(cfg Config) (*Store, error) {
	if len(cfg.Addrs) == 0 {
		return nil, errors.New("redis: no address")
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 2 * time.Second
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = "rl:"
	}
	opt := rueidis.ClientOption{
		InitAddress:      cfg.Addrs,
		Username:         cfg.Username,
		Password:         cfg.Password,
		TLSConfig:        cfg.TLS,
		Dialer:           netDialer(cfg.DialTimeout),
		DisableCache:     true,
		ConnWriteTimeout: cfg.DialTimeout,
		ShuffleInit:      true,
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("redis: connect to %s: %w", strings.Join(cfg.Addrs, ","), err)
	}
	s := &Store{
		cfg:    cfg,
		client: c,
		take:   rueidis.NewLuaScript(takeSource),
		refund: rueidis.NewLuaScript(refundSource),
	}
	if cfg.DenialCache {
		s.deny = newDenialCache()
	}
	s.bufs.New = func() any { return new(callBuf) }
	return s, nil
}

// LocalDenials returns how many calls the local denial cache decided without
// a round trip.
func (s *Store) LocalDenials() int64 {
	if s.deny == nil {
		return 0
	}
	return s.deny.Hits()
}

// Client returns the underlying rueidis client (for health probes and tests).
func (s *Store) Client() rueidis.Client { return s.client }

// Close closes the connections.
func (s *Store) Close() error {
	s.client.Close()
	return nil
}

// Key returns the Redis key of (client, rule): rl:{client}:rule.
func (s *Store) Key(client, rule string) string {
	return s.cfg.KeyPrefix + "{" + client + "}:" + rule
}

// callBuf is the per-call working memory.
type callBuf struct {
	groups [limiter.MaxRulesPerCall]group
	order  [limiter.MaxRulesPerCall]int // op index → group
}

type group struct {
	client string
	ops    []int // indexes into the call's ops
	keys   []string
	args   []string
	now    int64
	took   bool // the script consumed (no non-shadow op of this group denied)
	err    error
}

// Take implements limiter.Store: one script per client, all in one round
// trip; a cross-shard denial gives back what other shards took.
func (s *Store) Take(ctx context.Context, ops []limiter.Op, res []algorithm.Result) (limiter.TakeInfo, error) {
	if len(ops) > limiter.MaxRulesPerCall {
		return limiter.TakeInfo{}, limiter.ErrTooManyRules
	}
	sent := time.Now()
	if s.deny != nil {
		if now, ok := s.deny.check(ops, res, sent); ok {
			return limiter.TakeInfo{Now: now, Source: limiter.SourceLocalDenialCache}, nil
		}
	}
	b := s.bufs.Get().(*callBuf)
	defer s.bufs.Put(b)
	gs := s.group(b, ops)

	now := ""
	if s.cfg.Clock != nil {
		now = strconv.FormatInt(s.cfg.Clock(), 10)
	}
	for gi := range gs {
		g := &gs[gi]
		g.keys = g.keys[:0]
		g.args = append(g.args[:0], now)
		for _, i := range g.ops {
			op := &ops[i]
			g.keys = append(g.keys, s.Key(op.Client, op.Rule))
			g.args = append(g.args,
				strconv.Itoa(int(op.Params.Kind)+1),
				strconv.FormatInt(op.Params.Limit, 10),
				strconv.FormatInt(op.Params.Window, 10),
				strconv.FormatInt(op.Params.Burst, 10),
				strconv.FormatInt(op.Cost, 10),
				boolArg(op.Shadow))
		}
	}

	if len(gs) == 1 {
		gs[0].err = s.runTake(ctx, &gs[0], ops, res)
	} else {
		var wg sync.WaitGroup
		for gi := range gs {
			wg.Add(1)
			go func(g *group) {
				defer wg.Done()
				g.err = s.runTake(ctx, g, ops, res)
			}(&gs[gi])
		}
		wg.Wait()
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
	if firstErr != nil {
		return limiter.TakeInfo{}, firstErr
	}
	if s.deny != nil {
		s.deny.remember(ops, res, sent, latest)
	}
	return limiter.TakeInfo{Now: latest}, nil
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
			g.client, g.ops, g.took, g.err, g.now = ops[i].Client, g.ops[:0], false, nil, 0
		}
		b.groups[gi].ops = append(b.groups[gi].ops, i)
	}
	return b.groups[:n]
}

// runTake runs take.lua for one group and fills its results.
func (s *Store) runTake(ctx context.Context, g *group, ops []limiter.Op, res []algorithm.Result) error {
	reply, err := s.take.Exec(ctx, s.client, g.keys, g.args).ToArray()
	if err != nil {
		return fmt.Errorf("redis: take for %s: %w", g.client, err)
	}
	if len(reply) != 1+5*len(g.ops) {
		return fmt.Errorf("%w: take returned %d values for %d buckets", ErrReply, len(reply), len(g.ops))
	}
	vals := make([]int64, len(reply))
	for i := range reply {
		v, err := reply[i].AsInt64()
		if err != nil {
			return fmt.Errorf("%w: take value %d: %v", ErrReply, i, err)
		}
		vals[i] = v
	}
	g.now = vals[0]
	g.took = true
	for k, i := range g.ops {
		v := vals[1+5*k:]
		r := algorithm.Result{
			Allowed:    v[0] == 1,
			Reason:     algorithm.Reason(v[1]),
			Remaining:  v[2],
			ResetAfter: v[3],
			RetryAfter: v[4],
		}
		if v[0] != 0 && v[0] != 1 || v[1] < 0 || v[1] > 2 {
			return fmt.Errorf("%w: take result %v", ErrReply, v[:5])
		}
		res[i] = r
		if !r.Allowed && !ops[i].Shadow {
			g.took = false
		}
	}
	return nil
}

// giveBack refunds, in every group that took, each op that was allowed.
func (s *Store) giveBack(ctx context.Context, gs []group, ops []limiter.Op, res []algorithm.Result) {
	for gi := range gs {
		g := &gs[gi]
		if g.err != nil || !g.took {
			continue
		}
		var keys []string
		args := []string{strconv.FormatInt(g.now, 10)}
		for _, i := range g.ops {
			if !res[i].Allowed {
				continue
			}
			op := &ops[i]
			keys = append(keys, s.Key(op.Client, op.Rule))
			args = append(args,
				strconv.Itoa(int(op.Params.Kind)+1),
				strconv.FormatInt(op.Params.Limit, 10),
				strconv.FormatInt(op.Params.Window, 10),
				strconv.FormatInt(op.Params.Burst, 10),
				strconv.FormatInt(op.Cost, 10))
		}
		if len(keys) > 0 {
			// Best effort: a refund that fails leaves the caller charged for
			// a call it did not get, never the other way round.
			s.refund.Exec(ctx, s.client, keys, args)
		}
	}
	// The whole call was denied: report nothing as consumed.
	for i := range ops {
		if res[i].Allowed && !ops[i].Shadow {
			res[i].Changed = false
		}
	}
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
