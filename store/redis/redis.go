// Package redis keeps bucket state in Redis or a Redis Cluster, shared by
// every sluice instance: one atomic Lua script per client per call.
//
// Keys are rl:{<client>}:<rule-id>. The braces are a Redis Cluster hash tag,
// so all of one client's buckets live on one shard and are checked and taken
// by one script, all or nothing. On a cluster, a call whose rules key
// different clients (a per-user and a per-ip rule) runs one script per
// client, in one pipelined round trip, and gives back what it took when
// another shard denied (refund.lua). On a standalone server every call is
// one script run, all or nothing whatever its clients, and calls made at the
// same time share runs (see batcher): the fixed cost of a script run — the
// command, TIME, the reply — is paid once for many decisions.
//
// Time comes from the server (Redis TIME inside the script), never from the
// gateways' clocks.
package redis

import (
	"context"
	"crypto/sha1"
	"crypto/tls"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/seam/redisstore"
	"github.com/sluicehq/sluice/limiter"
)

var (
	//go:embed codec.lua
	codecSource string
	//go:embed take.lua
	takeBody string
	//go:embed refund.lua
	refundBody string
	//go:embed announce.lua
	announceSource string

	// take.lua and refund.lua read and write states with one codec.
	// take.lua defines take(keys, args): as a script (EVALSHA) it ends by
	// running it; as a Redis function library (FCALL) it registers it, so
	// that its definitions are made once, when the library loads, instead
	// of on every run.
	takeSource   = codecSource + takeBody + "\nreturn take(KEYS, ARGV)\n"
	refundSource = codecSource + refundBody

	// The library and its functions are named after the code, so that
	// sluice versions with different scripts can share a server. It holds
	// reserve.lua too (see reserve.go), whose definitions are then also
	// made once.
	libraryID       = fmt.Sprintf("%x", sha1.Sum([]byte(codecSource+takeBody+reserveBody)))[:12]
	takeFunction    = "sluice_take_" + libraryID
	reserveFunction = "sluice_reserve_" + libraryID
	librarySource   = "#!lua name=sluice_" + libraryID + "\n" + codecSource + takeBody + "\n" + reserveBody +
		"\nredis.register_function('" + takeFunction + "', take)" +
		"\nredis.register_function('" + reserveFunction + "', reserve)\n"
)

// Errors of the Redis store.
var (
	// ErrReply: Redis answered with a reply of the wrong shape. It wraps
	// limiter.ErrStoreReply: the call fails, not the store.
	ErrReply = fmt.Errorf("redis: unexpected reply: %w", limiter.ErrStoreReply)
)

// Config configures a Store: set Addrs; every other field's zero value is
// its default (DefaultConfig spells them out). New checks it (Validate).
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
	// NoDenialCache turns the exact local denial cache off (see
	// DenialCache): every call then goes to Redis. Default false: the
	// cache is on, and an abusive caller costs Redis nothing until its
	// bucket could pass again.
	NoDenialCache bool
	// Denials, when set, is the denial cache the store uses
	// (NoDenialCache is then ignored): give the same cache to every Store
	// made for one Redis, so that what Redis said outlives a client that
	// is dropped and made anew (the failover store reconnects that way).
	// Default nil: a cache of the store's own, unless NoDenialCache.
	Denials *DenialCache
	// Now is the clock of the denial cache: when a request was sent, and
	// whether a cached denial is over. Default time.Now (monotonic). A
	// cache shared through Denials must be read with one clock by all its
	// users.
	Now func() time.Time
	// Clock, when set, passes its reading (Unix µs) to the scripts instead of
	// the server's TIME. For deterministic tests only; it turns leases off.
	Clock func() int64
	// MaxBatch bounds the keys (rules × calls) one script run decides on a
	// standalone server, where calls made at the same time share a run
	// (checks with checks, reservations with reservations).
	// Default 64: a run then holds Redis for ~200 µs at most, while the
	// fixed cost per run is already spread thin. 1 sends every call in a
	// run of its own. A cluster never batches (its clients' keys live in
	// different slots).
	MaxBatch int
	// BatchConcurrency is how many runs may be in flight at once on a
	// standalone server; calls made while all are out wait for the next.
	// Default 4: enough to keep Redis busy while replies travel at
	// saturation; more makes smaller batches and more runs. Beyond the
	// first, a run goes only with BatchFill keys queued.
	BatchConcurrency int
	// BatchFill is how many keys must queue behind a run in flight before
	// another run goes; until then a call made while a run is out waits
	// for it to come back and goes in the next run with every call queued
	// meanwhile (group commit). A call made when no run is out goes at
	// once, so a lone caller never waits for others, and below saturation
	// no call waits longer than the run it found out; under moderate load
	// runs carry more decisions, which costs Redis less per decision, and
	// at saturation BatchConcurrency full runs are out. Default 16; above
	// MaxBatch it is MaxBatch. 1: a call goes at once while fewer than
	// BatchConcurrency runs are out (no group commit). With a BatchWait it
	// plays no part: the window coalesces instead. See docs/redis.md,
	// "How a decision runs".
	BatchFill int
	// BatchWait, when above 0, is a window for coalescing at moderate load
	// on a standalone server: a call that would start a script run (fewer
	// than BatchConcurrency runs out; BatchFill then plays no part) waits
	// up to BatchWait for other calls instead, and they go in one run, at
	// once when they fill MaxBatch keys. Fewer runs cost Redis less per
	// decision, at the price of up to BatchWait of latency per call. Each
	// call stays all or nothing and the run atomic; a caller whose context
	// ends while it waits for the run returns at once, its call not sent.
	// 0 (the default) to MaxBatchWait; without batching (MaxBatch 1, a
	// cluster) it has no effect. See docs/redis.md, "Coalescing at
	// moderate load".
	BatchWait time.Duration
	// RawIO makes the plain-TCP connections to Redis read and write with
	// system calls the Go scheduler is not told of, on Linux (TLS
	// connections are the client's own whatever it says). A write on
	// loopback can run longer than the runtime's 20 µs monitor tick; told
	// of, it has its thread's processor handed over and keeps the monitor
	// waking (see docs/redis.md, "Socket calls"). The trade: a raw call
	// cannot be preempted or handed over while it is in the kernel, so a
	// slow one holds its processor as running Go code would. Default
	// false; sluice's own binaries turn it on. SLUICE_RAW_IO=0 in the
	// environment turns raw calls off everywhere, this field included.
	RawIO bool
	// Evalsha runs take.lua with EVALSHA even where the server has Redis
	// functions (Redis 7 and later), where it is otherwise loaded once as a
	// function library and run with FCALL. Servers older than 7, and
	// servers that refuse FUNCTION LOAD, get EVALSHA whatever this says.
	Evalsha bool
	// FlushDelay, when above 0, lets a connection that has just written
	// wait up to this long before its next write while a reply is still
	// out, so that commands made in the meantime go in one write (the
	// client's MaxFlushDelay): fewer socket reads and writes on both sides,
	// at the price of up to FlushDelay of latency per command. A command
	// made when nothing is in flight is written at once. Default 0: every
	// command is written as soon as the connection is free (see
	// docs/redis.md, "Redis CPU per decision by load", for what it saved).
	FlushDelay time.Duration
	// NoLeases turns leases off: every decision of every rule is one
	// round trip (or a cached denial). Default false: a bucket this
	// instance decides LeaseRate times a second or more, of a rule with
	// lease auto (the default) or on, is decided from a batch of its
	// tokens leased from Redis (see docs/redis.md, "Leases for hot
	// buckets").
	NoLeases bool
	// LeaseRate is the rate, in decisions a second of one bucket on this
	// instance, from which a rule with lease: auto leases the bucket.
	// Default 100: below it a lease would save little and strand tokens
	// longer.
	LeaseRate float64
	// LeaseTTL is a lease's longest life: its unused tokens are given back
	// when it ends, and stranded until then if this instance dies. Default
	// 200ms. Shorter strands less; longer makes fewer lease calls at low
	// rates. A token bucket's lease lives at most a quarter of the time
	// its bucket takes to fill, a fixed window's until its window ends.
	LeaseTTL time.Duration
}

// defaultBatchFill is Config.BatchFill's default: runs of 16 keys spread a
// run's fixed cost so thin that bigger ones save little (docs/redis.md).
const defaultBatchFill = 16

// MaxBatchWait is the longest Config.BatchWait.
const MaxBatchWait = 10 * time.Millisecond

// DefaultConfig returns the defaults, without addresses: what New makes of
// a Config's zero fields.
func DefaultConfig() Config { return Config{}.withDefaults() }

// withDefaults returns c with its zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.DialTimeout == 0 {
		c.DialTimeout = 2 * time.Second
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = "rl:"
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = 64
	}
	if c.BatchConcurrency == 0 {
		c.BatchConcurrency = 4
	}
	if c.BatchFill == 0 {
		c.BatchFill = defaultBatchFill
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.LeaseRate == 0 {
		c.LeaseRate = defaultLeaseRate
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = defaultLeaseTTL
	}
	return c
}

// Validate reports the first field of c that cannot work, naming it and
// what it takes; nil when c can be used (zero fields take their defaults).
func (c Config) Validate() error {
	switch {
	case len(c.Addrs) == 0:
		return errors.New("redis: Config.Addrs is empty: give a standalone server's host:port, or any nodes of a cluster")
	case c.DialTimeout < 0:
		return fmt.Errorf("redis: Config.DialTimeout %s: want 0 (the default, 2s) or more", c.DialTimeout)
	case c.MaxBatch < 0:
		return fmt.Errorf("redis: Config.MaxBatch %d: want 0 (the default, 64), 1 (no batching) or more", c.MaxBatch)
	case c.BatchConcurrency < 0:
		return fmt.Errorf("redis: Config.BatchConcurrency %d: want 0 (the default, 4) or more", c.BatchConcurrency)
	case c.BatchFill < 0:
		return fmt.Errorf("redis: Config.BatchFill %d: want 0 (the default, %d), 1 (a call goes at once while fewer than BatchConcurrency runs are out) or more", c.BatchFill, defaultBatchFill)
	case c.FlushDelay < 0 || c.FlushDelay > time.Second:
		return fmt.Errorf("redis: FlushDelay %s: want 0 (write at once) up to 1s; a few hundred µs at most is useful", c.FlushDelay)
	case c.BatchWait < 0 || c.BatchWait > MaxBatchWait:
		return fmt.Errorf("redis: BatchWait %s: want 0 (no window) up to %s", c.BatchWait, MaxBatchWait)
	case c.LeaseRate < 0 || math.IsNaN(c.LeaseRate) || math.IsInf(c.LeaseRate, 0):
		return fmt.Errorf("redis: Config.LeaseRate %v: want 0 (the default, %d decisions/s) or more", c.LeaseRate, defaultLeaseRate)
	case c.LeaseTTL < 0 || c.LeaseTTL > time.Minute:
		return fmt.Errorf("redis: Config.LeaseTTL %s: want 0 (the default, %s) up to 1m", c.LeaseTTL, defaultLeaseTTL)
	}
	return nil
}

// Store is the shared counter store. Safe for concurrent use; use New.
type Store struct {
	cfg        Config
	client     rueidis.Client
	take       *rueidis.Lua
	refund     *rueidis.Lua
	announce   *rueidis.Lua
	deny       *DenialCache // nil: no cache
	bufs       sync.Pool
	cluster    bool                    // a Redis Cluster: one script per client, refunds across shards
	fcall      bool                    // take.lua is a function library on every node: FCALL, not EVALSHA
	batch      *batcher                // standalone, MaxBatch > 1: calls share script runs
	rbatch     *batcher                // the same for reservations (reserve.lua's runs)
	slots      atomic.Pointer[slotMap] // a cluster's masters by slot (see Shard)
	slotsAt    atomic.Int64            // Unix ns of the last reading of slots
	refundErrs atomic.Int64            // cross-shard give-backs that failed
	runs       atomic.Int64            // script runs sent (take.lua, reserve.lua)
	runKeys    atomic.Int64            // keys of those runs
	leases     *leases                 // nil: NoLeases
}

var _ limiter.Store = (*Store)(nil)

// New connects to the Redis server or cluster at cfg.Addrs and loads the
// scripts on every node. It fails, within DialTimeout or when ctx ends,
// with an error naming the addresses and what went wrong: cfg refused
// (Validate), no connection, or a node that refuses SCRIPT LOAD (an ACL
// without the scripting commands sluice needs).
func New(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	opt := rueidis.ClientOption{
		InitAddress:      slices.Clone(cfg.Addrs), // the client shuffles it in place
		Username:         cfg.Username,
		Password:         cfg.Password,
		TLSConfig:        cfg.TLS,
		Dialer:           netDialer(cfg.DialTimeout),
		DialCtxFn:        dialer(cfg.RawIO),
		DisableCache:     true,
		ConnWriteTimeout: min(cfg.DialTimeout, time.Second), // also the liveness PING: a silent (half-open) connection is dropped within a second
		ShuffleInit:      true,
		// No retries inside the client: a decision has a deadline of a few
		// milliseconds and its own fallback; a retried call only burns it.
		DisableRetry: true,
		// Rescan a cluster's topology every second, besides on errors, so
		// that a promoted replica is found within about a second.
		ClusterOption: rueidis.ClusterOption{ShardsRefreshInterval: time.Second},
		MaxFlushDelay: cfg.FlushDelay,
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("redis: connect to %s: %w", strings.Join(cfg.Addrs, ","), err)
	}
	s := &Store{
		cfg:      cfg,
		client:   c,
		take:     rueidis.NewLuaScript(takeSource),
		refund:   rueidis.NewLuaScript(refundSource),
		announce: rueidis.NewLuaScript(announceSource),
	}
	s.deny = cfg.Denials
	if s.deny == nil && !cfg.NoDenialCache {
		s.deny = NewDenialCache()
	}
	s.cluster = c.Mode() == rueidis.ClientModeCluster
	if !s.cluster && cfg.MaxBatch > 1 {
		s.batch = newBatcher(s, cfg.MaxBatch, cfg.BatchConcurrency, cfg.BatchFill, cfg.BatchWait)
		s.rbatch = newBatcher(s, cfg.MaxBatch, cfg.BatchConcurrency, cfg.BatchFill, 0) // reservations: no window
		s.rbatch.reserve = true
	}
	// Load the scripts on every node now, so that the first decisions do
	// not pay for NOSCRIPT and a compile (EVAL still covers a node that
	// loses them: a restart, a failover, SCRIPT FLUSH). A node that
	// refuses them is an error; one that does not answer in time is not (a
	// loaded server, or a master that is down: its calls fail, and the
	// breaker sees it; EVAL loads the scripts on first use).
	ctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	for addr, n := range c.Nodes() {
		for _, src := range []string{takeSource, refundSource, announceSource, reserveSource, leaseSource} {
			err := n.Do(ctx, n.B().ScriptLoad().Script(src).Build()).Error()
			if rerr, isRedis := rueidis.IsRedisErr(err); isRedis && !notLoadedYet(rerr.Error()) {
				c.Close()
				return nil, fmt.Errorf("redis: SCRIPT LOAD on %s: %w: the user must be allowed SCRIPT, EVALSHA and EVAL (and FUNCTION and FCALL on Redis 7)", addr, err)
			}
		}
	}
	s.fcall = !cfg.Evalsha && s.loadLibrary(ctx)
	if s.cluster {
		s.slotsAt.Store(time.Now().UnixNano())
		s.readSlots()
	}
	// Open the probes' connection now (see Probe): connecting it under
	// load can take longer than a probe may, and is not Redis's slowness.
	s.Probe(ctx, "sluice-probe") //nolint:errcheck // a probe that fails now is made again when needed
	s.bufs.New = func() any { return new(callBuf) }
	if !cfg.NoLeases && cfg.Clock == nil {
		// A lease's life is measured on this process's clock, which must
		// run with Redis's: a test clock (Clock) leases nothing.
		s.leases = newLeases(s)
	}
	return s, nil
}

// loadLibrary loads take.lua and reserve.lua as a function library on every node and
// reports whether every node that answered has it. A node that refuses
// FUNCTION LOAD (a server older than 7, a managed service or an ACL that
// forbids it: any error but those of notLoadedYet) makes it false: the
// store then runs take.lua with EVALSHA. A node that does not answer, or
// answers with a passing state, does not: when it serves a call without
// the library, FCALL's "Function not found" loads it again (see exec).
func (s *Store) loadLibrary(ctx context.Context) bool {
	ok := true
	for _, n := range s.client.Nodes() {
		err := n.Do(ctx, n.B().FunctionLoad().FunctionCode(librarySource).Build()).Error()
		if rerr, isRedis := rueidis.IsRedisErr(err); isRedis && !notLoadedYet(rerr.Error()) {
			ok = false
		}
	}
	return ok
}

// notLoadedYet reports whether FUNCTION LOAD's error msg says the node
// has the library already, gets it from its master (a replica), or is in
// a passing state, rather than that it refuses functions.
func notLoadedYet(msg string) bool {
	for _, m := range []string{"already exists", "READONLY", "LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN"} {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// command is the command that runs take.lua and reserve.lua: "FCALL" (a
// function library, Redis 7 and later) or "EVALSHA".
func (s *Store) command() string {
	if s.fcall {
		return "FCALL"
	}
	return "EVALSHA"
}

// Advice reads, on every node, the server settings that decide how sluice
// behaves and returns one line per setting worth changing, sorted; none when
// all are fine or when a node refuses CONFIG GET (managed services often
// do). See docs/redis.md, "Operating Redis".
//
//   - hz below 100: Redis's expiry cycle may hold the server for 250/hz ms
//     (25 ms at the default 10) when many keys expire, as sluice's do.
//   - a maxmemory with an eviction policy other than noeviction or
//     volatile-ttl: an evicted bucket starts full again, so callers get more
//     than their limit; volatile-ttl evicts the buckets nearest to full.
func (s *Store) Advice(ctx context.Context) []string {
	var out []string
	for addr, n := range s.client.Nodes() {
		m, err := n.Do(ctx, n.B().ConfigGet().Parameter("hz", "maxmemory", "maxmemory-policy").Build()).AsStrMap()
		if err != nil {
			continue
		}
		if hz, err := strconv.Atoi(m["hz"]); err == nil && hz > 0 && hz < 100 {
			out = append(out, fmt.Sprintf("redis %s: hz %d: expiring keys may hold the server for up to %d ms at a time; hz 100 keeps it to a few ms", addr, hz, 250/hz))
		}
		policy := m["maxmemory-policy"]
		if m["maxmemory"] != "" && m["maxmemory"] != "0" && policy != "" && policy != "noeviction" && policy != "volatile-ttl" {
			out = append(out, fmt.Sprintf("redis %s: maxmemory-policy %s: an evicted bucket starts full, so its caller gets more than the limit; size maxmemory to hold every bucket, or use volatile-ttl", addr, policy))
		}
	}
	sort.Strings(out)
	return out
}

// LocalDenials returns how many calls the local denial cache decided without
// a round trip (a cache shared through Config.Denials counts every user's).
func (s *Store) LocalDenials() int64 {
	if s.deny == nil {
		return 0
	}
	return s.deny.Hits()
}

// ScriptRuns returns how many script runs (take.lua and reserve.lua) the
// store has sent to Redis, a run retried on TRYAGAIN counted once, and the
// keys they decided: keys ÷ runs is how many buckets a run carried, which
// the sharing of runs raises (Config.BatchFill, BatchWait).
func (s *Store) ScriptRuns() (runs, keys int64) {
	return s.runs.Load(), s.runKeys.Load()
}

// RefundErrors returns how many cross-shard give-backs failed (see
// Take): each left a caller charged for a call it was denied, until its
// bucket refills.
func (s *Store) RefundErrors() int64 { return s.refundErrs.Load() }

// ErrorKind names the errors only Redis makes, for metrics: "redis" for an
// error reply, "network" for a client closing or unable to connect; "" for
// any other error.
func (s *Store) ErrorKind(err error) string {
	if _, ok := rueidis.IsRedisErr(err); ok {
		return "redis"
	}
	if errors.Is(err, rueidis.ErrClosing) {
		return "network"
	}
	return ""
}

// init sets the hooks by which sluice's tests and bench/redis read the
// store (internal/seam/redisstore).
func init() {
	redisstore.Client = func(s any) rueidis.Client { return s.(*Store).client }
	redisstore.Key = func(s any, client, rule string) string { return s.(*Store).key(client, rule) }
	redisstore.Command = func(s any) string { return s.(*Store).command() }
	redisstore.Leases = func(s any) redisstore.LeaseStats { return s.(*Store).leaseStats() }
}

// Close closes the connections.
func (s *Store) Close() error {
	if s.leases != nil {
		s.leases.close() // unused tokens back to the buckets
	}
	s.client.Close()
	return nil
}

// key returns the Redis key of (client, rule): rl:{client}:rule.
func (s *Store) key(client, rule string) string {
	return s.cfg.KeyPrefix + "{" + client + "}:" + rule
}

// giveBack refunds, in every group that took, each op that was allowed.
func (s *Store) giveBack(ctx context.Context, gs []group, ops []limiter.Op, res []algorithm.Result) {
	for gi := range gs {
		g := &gs[gi]
		if g.err != nil || !g.took {
			continue
		}
		var keys []string
		args := []string{strconv.FormatInt(g.now-epoch, 10)}
		for _, i := range g.ops {
			if !res[i].Allowed || ops[i].Cost == 0 { // cost 0 took nothing
				continue
			}
			op := &ops[i]
			keys = append(keys, s.key(op.Client, op.Rule))
			args = append(args,
				strconv.Itoa(int(op.Params.Kind)+1),
				strconv.FormatInt(op.Params.Limit, 10),
				strconv.FormatInt(op.Params.Window, 10),
				strconv.FormatInt(op.Params.Burst, 10),
				strconv.FormatInt(op.Cost, 10))
		}
		if len(keys) > 0 {
			// Within the call's deadline, so that the decision is never
			// held up by it. A refund that fails leaves the caller charged
			// for a call it did not get, never the other way round: it is
			// counted, and not tried again, since one whose answer was
			// lost may have run, and a second would give back twice.
			if err := s.giveBackRun(ctx, keys, args); err != nil {
				s.refundErrs.Add(1)
			}
		}
	}
	// The whole call was denied: report nothing as consumed.
	for i := range ops {
		if res[i].Allowed && !ops[i].Shadow {
			res[i].Changed = false
		}
	}
}

// giveBackRun runs refund.lua over keys, again while a slot's move answers
// TRYAGAIN (see run), until ctx ends.
func (s *Store) giveBackRun(ctx context.Context, keys, args []string) error {
	ctx = pipelined(ctx)
	_, err := again(ctx, 0, func() (string, error) {
		return "", s.refund.Exec(ctx, s.client, keys, args).Error()
	})
	return err
}

// Probe reports whether the store answers for client's buckets: a read of
// a key with client's hash tag, so that on a cluster the shard serving the
// client must answer (a PING could reach any node). It goes over a
// connection of its own (rueidis' dedicated pool), which carries nothing
// else: written and read by the calling goroutine, it does not queue behind
// the pipelined decisions, so its time is Redis's and the network's, not
// this process's queues'. The connection is kept for the next probe.
// Connecting it may take up to DialTimeout whatever ctx says.
//
// On a cluster the probe follows MOVED and ASK as a decision does: a slot
// that moved, or is moving, to another master is that master's to answer
// for (the dedicated connection does not follow them by itself).
func (s *Store) Probe(ctx context.Context, client string) error {
	key := s.key(client, "probe")
	dc, release := s.client.Dedicate()
	err := dc.Do(ctx, dc.B().Exists().Key(key).Build()).Error()
	release()
	for range maxRedirects {
		addr, ask := redirect(err)
		if addr == "" {
			break
		}
		err = s.probeAt(ctx, addr, key, ask)
	}
	if err != nil {
		return fmt.Errorf("redis: probe: %w", err)
	}
	return nil
}

// maxRedirects bounds the MOVED and ASK replies a probe follows: a slot
// moves from one master to one other at a time, so two is the most a
// healthy cluster gives; more is a topology that changes under the probe.
const maxRedirects = 3

// redirect returns the address of a MOVED or ASK reply err, and whether it
// is ASK; "" for any other error.
func redirect(err error) (addr string, ask bool) {
	rerr, ok := rueidis.IsRedisErr(err)
	if !ok {
		return "", false
	}
	if addr, ok := rerr.IsMoved(); ok {
		return addr, false
	}
	if addr, ok := rerr.IsAsk(); ok {
		return addr, true
	}
	return "", false
}

// probeAt reads key on the node at addr on a dedicated connection of that
// node, after ASKING when ask. A node the client does not know yet (a
// master that just joined) is asked through the client's own connections,
// which follow the redirect themselves.
func (s *Store) probeAt(ctx context.Context, addr, key string, ask bool) error {
	n, ok := s.client.Nodes()[addr]
	if !ok {
		return s.client.Do(ctx, s.client.B().Exists().Key(key).Build()).Error()
	}
	dc, release := n.Dedicate()
	defer release()
	if !ask {
		return dc.Do(ctx, dc.B().Exists().Key(key).Build()).Error()
	}
	rs := dc.DoMulti(ctx, dc.B().Asking().Build(), dc.B().Exists().Key(key).Build())
	if err := rs[0].Error(); err != nil {
		return err
	}
	return rs[1].Error()
}

// Announce registers instance id as live for ttl in the sorted set
// <KeyPrefix>instances (rl:instances by default; one key: one shard) and
// returns how many instances are live, dropping those whose announcement
// expired. Deployments sharing a Redis under different prefixes count
// their own instances.
func (s *Store) Announce(ctx context.Context, id string, ttl time.Duration) (int, error) {
	n, err := s.announce.Exec(ctx, s.client, []string{s.cfg.KeyPrefix + "instances"},
		[]string{id, strconv.FormatInt(ttl.Milliseconds(), 10)}).AsInt64()
	if err != nil {
		return 0, fmt.Errorf("redis: announce: %w", err)
	}
	return int(n), nil
}
