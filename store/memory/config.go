package memory

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"time"
)

// MaxShards bounds Config.Shards.
const MaxShards = 1 << 16

// Config configures a Store. A zero field takes its default, so Config{} is
// the same as DefaultConfig().
type Config struct {
	// Shards is the number of independently locked partitions of the
	// buckets, a power of two ≤ MaxShards. A client's buckets all live in one
	// shard (the shard is chosen by client id, like the Redis hash tag), so a
	// call on one client locks one shard. Default: 256, or 4×GOMAXPROCS
	// rounded up to a power of two when that is larger. More shards mean
	// fewer calls waiting on each other and a shorter lock hold per shard
	// while sweeping; each costs a few hundred bytes when empty.
	Shards int

	// Clock returns the time decisions are made at, in Unix µs (> 0). It is
	// read once per Take. Default: the wall time at New plus the monotonic
	// time elapsed since, so the store's time never goes backwards even when
	// the wall clock is stepped; the price is drift from the wall clock over
	// a long uptime (which a rate limiter does not mind). Inject a clock in
	// tests.
	Clock func() int64

	// SweepInterval is how often a background goroutine drops idle buckets,
	// one slice of the shards at a time so that no lock is held long.
	// Default: 10s. Shorter frees memory sooner at the cost of more
	// scanning; a negative value disables the background sweeper (Sweep can
	// still be called). Idle buckets are treated as new whether or not they
	// have been swept, so the interval never changes a decision.
	SweepInterval time.Duration

	// MaxBuckets is the most buckets the store holds: the ceiling on its
	// memory, which distinct callers (an attacker with many IPv6 /64s, say)
	// would otherwise grow at will. Default: DefaultMaxBuckets. A token
	// bucket with a 16-byte client id takes about 85 bytes of Go heap
	// (BenchmarkMemory), so the default is about 80 MiB of heap, some
	// 140 MiB of process memory with the garbage collector's headroom. The
	// ceiling holds per shard (each holds MaxBuckets/Shards, the remainder
	// spread one each), so overflow may begin a little before the whole
	// store is full; it must be at least Shards. When a new bucket would
	// pass it, the store makes room only from full (idle) buckets, and
	// else decides the call on its rule's overflow bucket in the shard,
	// shared by the callers it has no room for (see Store): a bucket with
	// state is never forgotten.
	MaxBuckets int

	// Logger receives one warning, the first time the ceiling makes the
	// store decide a call on an overflow bucket. Default: slog.Default().
	Logger *slog.Logger
}

// DefaultMaxBuckets is the default Config.MaxBuckets.
const DefaultMaxBuckets = 1_000_000

// DefaultConfig returns the default configuration.
func DefaultConfig() Config {
	return Config{
		Shards:        defaultShards(),
		Clock:         monotonicClock(),
		SweepInterval: 10 * time.Second,
		MaxBuckets:    DefaultMaxBuckets,
		Logger:        slog.Default(),
	}
}

// Validate reports whether c is usable; zero fields count as their default.
func (c Config) Validate() error {
	if c.Shards < 0 || c.Shards > MaxShards || c.Shards&(c.Shards-1) != 0 {
		return fmt.Errorf("%w: shards = %d, want a power of two ≤ %d", ErrInvalidConfig, c.Shards, MaxShards)
	}
	if c.MaxBuckets < 0 {
		return fmt.Errorf("%w: max buckets = %d, want ≥ 1 (0: the default %d)", ErrInvalidConfig, c.MaxBuckets, DefaultMaxBuckets)
	}
	return nil
}

// ErrInvalidConfig is wrapped by the errors of Config.Validate and New.
var ErrInvalidConfig = errors.New("memory: invalid config")

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Shards == 0 {
		c.Shards = defaultShards()
	}
	if c.Clock == nil {
		c.Clock = monotonicClock()
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = 10 * time.Second
	}
	if c.MaxBuckets == 0 {
		c.MaxBuckets = DefaultMaxBuckets
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// defaultShards is max(256, 4×GOMAXPROCS rounded up to a power of two): 256
// keeps the chance that two of up to 64 concurrent calls share a lock low,
// and larger machines get proportionally more.
func defaultShards() int {
	n := 256
	for n < 4*runtime.GOMAXPROCS(0) && n < MaxShards {
		n *= 2
	}
	return n
}

// monotonicClock returns wall time at the call plus monotonic time elapsed
// since, in Unix µs.
func monotonicClock() func() int64 {
	start := time.Now()
	wall := start.UnixMicro()
	return func() int64 { return wall + time.Since(start).Microseconds() }
}
