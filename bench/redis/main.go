// Command redis drives sluice's Redis path — limiter.Limiter over
// store/redis, one token_bucket rule of 100 calls per 10 s per user (the
// textbook script's capacity 100, refill 10/s) — and measures decisions/s,
// latency and the Redis CPU time the decisions cost (INFO cpu before and
// after), the figure bench/redis.sh compares with the textbook script.
//
//	go run ./bench/redis -redis 127.0.0.1:6390                   # closed loop, 256 callers
//	go run ./bench/redis -redis 127.0.0.1:6390 -concurrency 1 -requests 20000
//	go run ./bench/redis -redis 127.0.0.1:6390 -rate 30000       # fixed rate
//	go run ./bench/redis -redis 127.0.0.1:6390 -mode incr        # the counter baseline
//	go run ./bench/redis -redis 127.0.0.1:6390 -mode reserve -rate 5000   # reservations
//	go run ./bench/redis -redis 127.0.0.1:6390 -zipf 1.1 -global 100000   # Zipf callers and a global rule
//	go run ./bench/redis -redis 127.0.0.1:6390 -global 100000 -caller=false   # the global rule alone: a hot key
//
// -mode incr measures, under the same load, what a fixed-window counter
// in the manner of envoyproxy/ratelimit costs Redis per decision: one
// pipeline of INCRBY and EXPIRE per key (the key names the window's start;
// allowed while the count is within the limit). It shares no code with
// that project: it is the two commands, sent as one round trip.
//
// -mode floor runs, once per decision, a script that does only what every
// exact limiter running one script per decision must: read the server's
// clock, read the bucket, write it back with an expiry, answer
// (bench/redis/floor.lua, FCALL; Redis 7 or later). No decision: the
// least such a decision can cost Redis, beside the counter's two commands.
//
// -mode textbook runs, per decision, the textbook token bucket
// (bench/redis/textbook.lua, EVALSHA, time from the caller in seconds) on
// the caller's key, capacity 100 refilling 10 a second (sluice's rule),
// and with -global on the global key too (capacity and refill -global),
// both in one pipeline: what a limiter built on that script costs for the
// same two rules.
//
// -mode reserve makes each decision a reservation (limiter.Reserve, up to
// -max-wait) on the same rule and users instead of a check: what a
// reservation costs Redis beside a check (bench/reserve.sh). A decision
// is a reservation granted or refused.
//
// Every run is bounded by -duration (and -requests when set). The last line
// is machine-readable: RESULT key=value ….
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	_ "embed"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/bench/redis/redisinfo"
	"github.com/sluicehq/sluice/internal/bench/loadgen"
	"github.com/sluicehq/sluice/internal/gctune"
	"github.com/sluicehq/sluice/internal/seam/redisstore"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
	sredis "github.com/sluicehq/sluice/store/redis"
)

//go:embed floor.lua
var floorLibrary string

//go:embed textbook.lua
var textbookScript string

func main() {
	var (
		addr        = flag.String("redis", "", "Redis address host:port (required; a server of its own, never a shared one)")
		duration    = flag.Duration("duration", 10*time.Second, "how long to drive load (upper bound)")
		concurrency = flag.Int("concurrency", 256, "concurrent callers")
		keyspace    = flag.Int("keyspace", 1_000_000, "distinct users the callers pick from at random")
		requests    = flag.Int64("requests", 0, "stop after this many decisions (0: only -duration bounds the run)")
		rate        = flag.Float64("rate", 0, "fixed total rate in decisions/s, latency measured from the intended send time (0: as fast as possible)")
		warmup      = flag.Int("warmup", 2000, "decisions made before measuring (loads the script, opens connections)")
		cpuprofile  = flag.String("cpuprofile", "", "write a CPU profile of the measured run to this file")
		cache       = flag.Bool("denial-cache", true, "enable the store's local denial cache")
		maxBatch    = flag.Int("max-batch", sredis.DefaultConfig().MaxBatch, "store/redis Config.MaxBatch (1: no batching)")
		batchConc   = flag.Int("batch-concurrency", sredis.DefaultConfig().BatchConcurrency, "store/redis Config.BatchConcurrency")
		batchFill   = flag.Int("batch-fill", sredis.DefaultConfig().BatchFill, "store/redis Config.BatchFill: keys queued behind a run in flight from which another run goes (1: a call goes at once while fewer than -batch-concurrency runs are out)")
		gcFloor     = flag.Int("gc-floor-mib", 64, "as sluice serve's --gc-floor-mib (0: Go's default pacing)")
		mode        = flag.String("mode", "sluice", "sluice: limiter.Limiter over store/redis; reserve: the same, each decision a reservation (Limiter.Reserve); incr: one INCRBY+EXPIRE pipeline per decision (the counter baseline); textbook: the textbook script (bench/redis/textbook.lua) per key, one pipeline per decision; floor: one run per decision of a script that reads TIME, GETs and SETs the key and decides nothing (bench/redis/floor.lua)")
		maxWait     = flag.Duration("max-wait", time.Second, "-mode reserve: the longest a reservation may wait for its slot")
		evalsha     = flag.Bool("evalsha", false, "store/redis Config.Evalsha: run take.lua with EVALSHA, not FCALL")
		batchWait   = flag.Duration("batch-wait", 0, "store/redis Config.BatchWait: how long a call that would start a script run waits for others to share it (0: it goes at once; up to 10ms)")
		zipf        = flag.Float64("zipf", 0, "pick users by a Zipf law of this exponent (> 1; a few heavy callers), not uniformly (0)")
		global      = flag.Int64("global", 0, "add a by: global rule of this many calls a second (a hot key; 0: none); -mode incr and textbook then count a global key too")
		caller      = flag.Bool("caller", true, "the per-user rule (false, with -global: the global rule alone, hot-key traffic only)")
		leases      = flag.Bool("leases", true, "store/redis leases for hot buckets (false: Config.NoLeases)")
		pin         = flag.Bool("pin", false, "pin the per-user rule lease: on (not leased still: its leases would be under 8 tokens)")
		leaseTTL    = flag.Duration("lease-ttl", 0, "store/redis Config.LeaseTTL: a lease's longest life (0: the default)")
		flushDelay  = flag.Duration("flush-delay", 0, "store/redis Config.FlushDelay: how long a connection may hold a write for more commands while a reply is out (0: write at once)")
	)
	flag.Parse()
	if *addr == "" {
		fmt.Fprintln(os.Stderr, "redis bench: -redis is required")
		os.Exit(2)
	}
	defer gctune.Floor(uint64(*gcFloor) << 20).Stop()
	cfg := sredis.DefaultConfig()
	cfg.Addrs = []string{*addr}
	cfg.NoDenialCache = !*cache
	cfg.MaxBatch = *maxBatch
	cfg.BatchConcurrency = *batchConc
	cfg.BatchFill = *batchFill
	cfg.Evalsha = *evalsha
	cfg.FlushDelay = *flushDelay
	cfg.BatchWait = *batchWait
	cfg.NoLeases = !*leases
	cfg.LeaseTTL = *leaseTTL
	pinCaller = *pin
	pickZipf, globalLimit, perCaller = *zipf, *global, *caller || *global == 0
	if *mode != "sluice" && *mode != "incr" && *mode != "reserve" && *mode != "floor" && *mode != "textbook" {
		fmt.Fprintf(os.Stderr, "redis bench: -mode %q: want sluice, reserve, incr, textbook or floor\n", *mode)
		os.Exit(2)
	}
	if err := run(cfg, *mode, *duration, *concurrency, *keyspace, *requests, *rate, *warmup, *cpuprofile, *maxWait); err != nil {
		fmt.Fprintln(os.Stderr, "redis bench:", err)
		os.Exit(1)
	}
}

// The counter baseline's rule: a fixed window of a second (the shortest of
// envoyproxy/ratelimit's units), 10 calls a second: the rate of sluice's
// 100 per 10 s. Its keys expire within the run, as sluice's do (about a
// second after a bucket is full again): a key's deletion is part of what
// a decision costs Redis in the long run, and a window of a minute would
// only move it past the end of a 10 s measurement.
const (
	incrWindow = 1 // seconds
	incrLimit  = 10
)

// pickZipf, globalLimit, perCaller and pinCaller are -zipf, -global,
// -caller and -pin.
var (
	pickZipf    float64
	globalLimit int64
	perCaller   bool
	pinCaller   bool
)

// picker returns a function that picks a user index: uniformly, or by a
// Zipf law (-zipf).
func picker(r *rand.Rand, n int) func() int {
	if pickZipf > 1 && n > 1 {
		z := rand.NewZipf(r, pickZipf, 1, uint64(n-1))
		return func() int { return int(z.Uint64()) }
	}
	return func() int { return r.IntN(n) }
}

func run(cfg sredis.Config, mode string, duration time.Duration, concurrency, keyspace int, requests int64, rate float64, warmup int, cpuprofile string, maxWait time.Duration) error {
	if concurrency < 1 || keyspace < 1 || duration <= 0 {
		return errors.New("-concurrency, -keyspace and -duration must be positive")
	}
	cfg.RawIO = true // as sluice's binaries run the store
	store, err := sredis.New(context.Background(), cfg)
	if err != nil {
		return err
	}
	defer store.Close()

	set := &rules.Set{Rules: []rules.Rule{{
		ID:        "bench",
		By:        rules.ByUser,
		Limit:     100,
		Window:    rules.Duration(10 * time.Second),
		Algorithm: algorithm.TokenBucket,
	}}}
	if pinCaller {
		set.Rules[0].Lease = rules.LeaseOn
	}
	if globalLimit > 0 {
		set.Rules = append(set.Rules, rules.Rule{ID: "global", By: rules.ByGlobal, Limit: globalLimit,
			Window: rules.Duration(time.Second), Algorithm: algorithm.TokenBucket})
	}
	if !perCaller {
		set.Rules = set.Rules[1:]
	}
	ix, err := rules.Compile(set)
	if err != nil {
		return err
	}
	lim := limiter.New(store, limiter.Config{})
	lim.SetRules(ix)

	users := make([]string, keyspace)
	for i := range users {
		users[i] = "u" + strconv.Itoa(1_000_000_000 + i)[1:]
	}
	newCall := func(worker int) loadgen.Call {
		r := rand.New(rand.NewPCG(uint64(worker)+1, uint64(time.Now().UnixNano())))
		req := limiter.Request{Method: "GET", Path: "/api/orders"}
		pick := picker(r, len(users))
		return func(ctx context.Context) (bool, error) {
			req.User = users[pick()]
			d, err := lim.Check(ctx, &req)
			return d.Allowed, err
		}
	}
	command := redisstore.Command(store)
	if mode == "reserve" {
		newCall = func(worker int) loadgen.Call {
			r := rand.New(rand.NewPCG(uint64(worker)+1, uint64(time.Now().UnixNano())))
			req := limiter.Request{Method: "GET", Path: "/api/orders"}
			return func(ctx context.Context) (bool, error) {
				req.User = users[r.IntN(len(users))]
				d, _, err := lim.Reserve(ctx, &req, maxWait)
				return d.Allowed, err
			}
		}
	}
	if mode == "incr" {
		c := redisstore.Client(store)
		command = "incrby"
		newCall = func(worker int) loadgen.Call {
			r := rand.New(rand.NewPCG(uint64(worker)+1, uint64(time.Now().UnixNano())))
			pick := picker(r, len(users))
			return func(ctx context.Context) (bool, error) {
				start := time.Now().Unix() / incrWindow * incrWindow
				key := "rl:{user:" + users[pick()] + "}:bench_" + strconv.FormatInt(start, 10)
				if globalLimit > 0 && !perCaller {
					gkey := "rl:{global}:global_" + strconv.FormatInt(start, 10)
					rs := c.DoMulti(ctx,
						c.B().Incrby().Key(gkey).Increment(1).Build(),
						c.B().Expire().Key(gkey).Seconds(incrWindow).Build())
					g, err := rs[0].AsInt64()
					return g <= globalLimit, errors.Join(err, rs[1].Error())
				}
				if globalLimit > 0 {
					// two descriptors: each key its INCRBY and EXPIRE, one round trip
					gkey := "rl:{global}:global_" + strconv.FormatInt(start, 10)
					rs := c.DoMulti(ctx,
						c.B().Incrby().Key(key).Increment(1).Build(),
						c.B().Expire().Key(key).Seconds(incrWindow).Build(),
						c.B().Incrby().Key(gkey).Increment(1).Build(),
						c.B().Expire().Key(gkey).Seconds(incrWindow).Build())
					n, err := rs[0].AsInt64()
					g, gerr := rs[2].AsInt64()
					return n <= incrLimit && g <= globalLimit, errors.Join(err, gerr)
				}
				rs := c.DoMulti(ctx,
					c.B().Incrby().Key(key).Increment(1).Build(),
					c.B().Expire().Key(key).Seconds(incrWindow).Build())
				n, err := rs[0].AsInt64()
				if err == nil {
					err = rs[1].Error()
				}
				return n <= incrLimit, err
			}
		}
	}

	if mode == "textbook" {
		c := redisstore.Client(store)
		command = "evalsha"
		sha, err := c.Do(context.Background(), c.B().ScriptLoad().Script(textbookScript).Build()).ToString()
		if err != nil {
			return fmt.Errorf("-mode textbook: SCRIPT LOAD: %w", err)
		}
		newCall = func(worker int) loadgen.Call {
			r := rand.New(rand.NewPCG(uint64(worker)+1, uint64(time.Now().UnixNano())))
			pick := picker(r, len(users))
			return func(ctx context.Context) (bool, error) {
				now := strconv.FormatInt(time.Now().Unix(), 10)
				key := "rl:{user:" + users[pick()] + "}:bench"
				cmds := make(rueidis.Commands, 0, 2)
				if perCaller {
					cmds = append(cmds, c.B().Evalsha().Sha1(sha).Numkeys(1).Key(key).Arg("100", "10", "1", now).Build())
				}
				if globalLimit > 0 {
					g := strconv.FormatInt(globalLimit, 10)
					cmds = append(cmds, c.B().Evalsha().Sha1(sha).Numkeys(1).Key("rl:{global}:global").Arg(g, g, "1", now).Build())
				}
				allowed := true
				for _, rs := range c.DoMulti(ctx, cmds...) {
					v, err := rs.ToArray()
					if err != nil {
						return false, err
					}
					if a, err := v[0].AsInt64(); err != nil || a != 1 {
						allowed = false
					}
				}
				return allowed, nil
			}
		}
	}

	if mode == "floor" {
		c := redisstore.Client(store)
		command = "fcall"
		if err := c.Do(context.Background(), c.B().FunctionLoad().Replace().FunctionCode(floorLibrary).Build()).Error(); err != nil {
			return fmt.Errorf("-mode floor: FUNCTION LOAD: %w", err)
		}
		newCall = func(worker int) loadgen.Call {
			r := rand.New(rand.NewPCG(uint64(worker)+1, uint64(time.Now().UnixNano())))
			return func(ctx context.Context) (bool, error) {
				key := redisstore.Key(store, "user:"+users[r.IntN(len(users))], "bench")
				s, err := c.Do(ctx, c.B().Fcall().Function("sluice_bench_floor").Numkeys(1).Key(key).Arg("").Build()).ToString()
				if err == nil && len(s) != 34 {
					err = fmt.Errorf("floor answered %d bytes, want 34", len(s))
				}
				return true, err
			}
		}
	}

	ctx := context.Background()
	if warmup > 0 {
		res, err := loadgen.Run(ctx, loadgen.Config{Concurrency: min(concurrency, 16), Duration: 30 * time.Second,
			Requests: int64(warmup), NewCall: newCall})
		if err != nil {
			return err
		}
		if res.Errors > 0 {
			return fmt.Errorf("warm-up: %d errors, first: %v", res.Errors, res.FirstErr)
		}
	}

	denied0, lease0 := store.LocalDenials(), redisstore.Leases(store)
	cpu0, err := redisinfo.CPU(ctx, redisstore.Client(store))
	if err != nil {
		return err
	}
	reads0, writes0, err := redisinfo.IO(ctx, redisstore.Client(store))
	if err != nil {
		return err
	}
	cmd0, err := redisinfo.Commands(ctx, redisstore.Client(store), command)
	if err != nil {
		return err
	}
	if cpuprofile != "" {
		f, err := os.Create(cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	res, err := loadgen.Run(ctx, loadgen.Config{Concurrency: concurrency, Duration: duration, Requests: requests,
		Rate: rate, NewCall: newCall})
	if cpuprofile != "" {
		pprof.StopCPUProfile()
	}
	if err != nil {
		return err
	}
	cpu1, err := redisinfo.CPU(ctx, redisstore.Client(store))
	if err != nil {
		return err
	}
	reads1, writes1, err := redisinfo.IO(ctx, redisstore.Client(store))
	if err != nil {
		return err
	}
	// The socket reads and writes per 1,000 decisions, less the INFO
	// calls' own that fall between the two readings: the reads of INFO
	// commandstats, INFO cpu and the last INFO stats, the replies of the
	// first INFO stats, INFO commandstats and INFO cpu.
	readsPer := perThousandN(reads1-reads0-3, res.Requests)
	writesPer := perThousandN(writes1-writes0-3, res.Requests)
	cmd1, err := redisinfo.Commands(ctx, redisstore.Client(store), command)
	if err != nil {
		return err
	}

	cpu := cpu1 - cpu0
	// ops decided in process: denials from the local denial cache, and
	// ops decided from a lease (two rules: a decision has two ops)
	lease1 := redisstore.Leases(store)
	localDenials, leased := store.LocalDenials()-denied0, lease1.Decided-lease0.Decided
	perSec := res.PerSecond()
	perCPU := 0.0
	if cpu > 0 {
		perCPU = float64(res.Requests) / cpu
	}
	usecPerCall := 0.0
	if n := cmd1[0].Calls - cmd0[0].Calls; n > 0 {
		usecPerCall = (cmd1[0].Usec - cmd0[0].Usec) / float64(n)
	}
	load := "closed loop"
	if rate > 0 {
		load = fmt.Sprintf("fixed rate %.0f/s, latency from the intended send time", rate)
	}
	if mode == "incr" {
		fmt.Printf("counter baseline (INCRBY+EXPIRE pipeline per decision, %d per %d s window): %d callers, %s, keyspace %d, flush delay %s, GOMAXPROCS %d\n",
			incrLimit, incrWindow, concurrency, load, keyspace, cfg.FlushDelay, runtime.GOMAXPROCS(0))
	} else if mode == "floor" {
		fmt.Printf("script floor (bench/redis/floor.lua: TIME, GET, SET PX, no decision; one FCALL per decision): %d callers, %s, keyspace %d, flush delay %s, GOMAXPROCS %d\n",
			concurrency, load, keyspace, cfg.FlushDelay, runtime.GOMAXPROCS(0))
	} else if mode == "reserve" {
		fmt.Printf("sluice reservations (%s, max wait %s): %d callers, %s, keyspace %d, flush delay %s, GOMAXPROCS %d\n",
			command, maxWait, concurrency, load, keyspace, cfg.FlushDelay, runtime.GOMAXPROCS(0))
	} else {
		fmt.Printf("sluice Redis path (%s): %d callers, %s, keyspace %d, denial cache %v, max batch %d, batch concurrency %d, batch fill %d, batch wait %s, flush delay %s, GOMAXPROCS %d\n",
			command, concurrency, load, keyspace, !cfg.NoDenialCache, cfg.MaxBatch, cfg.BatchConcurrency, cfg.BatchFill, cfg.BatchWait, cfg.FlushDelay, runtime.GOMAXPROCS(0))
	}
	fmt.Printf("  decisions     %d (%d allowed, %d denied, %d errors) in %s\n", res.Requests, res.Allowed, res.Denied, res.Errors, res.Elapsed.Round(time.Millisecond))
	fmt.Printf("  decisions/s   %.0f\n", perSec)
	fmt.Printf("  latency       p50 %s  p90 %s  p99 %s  p99.9 %s  max %s\n", us(res.Latency.Quantile(0.5)), us(res.Latency.Quantile(0.9)),
		us(res.Latency.Quantile(0.99)), us(res.Latency.Quantile(0.999)), us(res.Latency.Max()))
	fmt.Printf("  redis CPU     %.3f s (used_cpu_user+used_cpu_sys) → %.0f decisions per Redis CPU-second\n", cpu, perCPU)
	fmt.Printf("  redis CPU per 1,000 decisions  %.2f ms\n", perThousand(cpu, res.Requests))
	fmt.Printf("  redis socket  %.0f reads and %.0f writes per 1,000 decisions\n", readsPer, writesPer)
	fmt.Printf("  %-13s %d calls, %.2f µs per call inside Redis\n", strings.ToLower(command), cmd1[0].Calls-cmd0[0].Calls, usecPerCall)
	if res.Late > 0 || res.Missed > 0 {
		fmt.Printf("  schedule      %d calls late, %d missed (the generator fell behind)\n", res.Late, res.Missed)
	}
	if res.Errors > 0 {
		fmt.Printf("  first error   %v\n", res.FirstErr)
	}
	fmt.Printf("RESULT mode=%s command=%s decisions=%d errors=%d decisions_per_s=%.0f p50_us=%.1f p99_us=%.1f redis_cpu_s=%.3f decisions_per_cpu_s=%.0f cpu_ms_per_1000=%.2f usec_per_call=%.2f calls=%d late=%d reads_per_1000=%.0f writes_per_1000=%.0f local_denials=%d leased_ops=%d lease_calls=%d\n",
		mode, strings.ToLower(command), res.Requests, res.Errors, perSec, micros(res.Latency.Quantile(0.5)), micros(res.Latency.Quantile(0.99)), cpu, perCPU,
		perThousand(cpu, res.Requests), usecPerCall, cmd1[0].Calls-cmd0[0].Calls, res.Late, readsPer, writesPer, localDenials, leased, lease1.Calls-lease0.Calls)
	if res.Errors > 0 {
		return fmt.Errorf("%d calls failed", res.Errors)
	}
	return nil
}

// perThousand is Redis CPU in ms per 1,000 decisions.
func perThousand(cpuSeconds float64, decisions int64) float64 {
	if decisions == 0 {
		return 0
	}
	return cpuSeconds * 1e6 / float64(decisions)
}

// perThousandN is n per 1,000 decisions.
func perThousandN(n, decisions int64) float64 {
	if decisions == 0 {
		return 0
	}
	return float64(n) * 1000 / float64(decisions)
}

func us(d time.Duration) string { return strconv.FormatFloat(micros(d), 'f', 1, 64) + "µs" }

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
