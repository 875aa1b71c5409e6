// Command scriptcost measures what a script run costs Redis, part by part,
// side by side: versions of take.lua, probes that do one thing each, and the
// counter's INCRBY+EXPIRE pipeline, each over new buckets of the token
// bucket rule of bench/redis (100 per 10 s), in alternating rounds.
//
//	git show main:store/redis/take.lua > /tmp/take-main.lua
//	go run ./bench/redis/scriptcost -redis 127.0.0.1:6390 main=/tmp/take-main.lua new=store/redis/take.lua
//	go run ./bench/redis/scriptcost -redis 127.0.0.1:6390 -loop 1000 main=/tmp/take-main.lua new=store/redis/take.lua
//
// Each argument name=file is a take.lua (store/redis/codec.lua, read from
// the working directory, is put in front, as redis.go does) loaded as a
// function library of its own. Without -loop every decision is one FCALL
// (one key, ARGV[1] "", so the script reads TIME), sent one after another:
// "inside" is INFO commandstats' time per FCALL (wall time inside Redis)
// and "Redis CPU" the server's used_cpu_user+used_cpu_sys per decision,
// round trip included. The probes run the same way: noop (an empty
// function), time (TIME), mget (MGET of the key), set (SET PX of a
// 16-digit value) and floor (TIME, GET, SET PX: the Redis commands
// take.lua runs for a lone call of one key, GET for MGET, without deciding,
// as bench/redis -mode floor). With -loop
// K each FCALL runs take K times on K new keys inside Redis: Redis CPU per
// decision is then the script's alone, without the command and the round
// trip, and the least sensitive to other work on the machine.
//
// It FLUSHALLs the server before every round: give it a server of its own.
// Prints the median and the least of the rounds, per contender.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/bench/redis/redisinfo"
)

const probes = `#!lua name=scriptcost_probes
redis.register_function('scriptcost_noop', function(keys, args) return 'x' end)
redis.register_function('scriptcost_time', function(keys, args) redis.call('TIME') return 'x' end)
redis.register_function('scriptcost_mget', function(keys, args) redis.call('MGET', keys[1]) return 'x' end)
redis.register_function('scriptcost_set', function(keys, args) redis.call('SET', keys[1], '1000000000000000', 'PX', '2000') return 'x' end)
redis.register_function('scriptcost_floor', function(keys, args)
  redis.call('TIME') redis.call('GET', keys[1]) redis.call('SET', keys[1], '1000000000000000', 'PX', '2000')
  return '0123456789abcdef0123456789abcdef01'
end)
`

// params is take.lua's ARGV[2] for one key of bench/redis's rule: token
// bucket, a new call, 100 per 10 s, no burst, cost 1.
func params() string {
	b := []byte{1, 2}
	for _, v := range []float64{100, 10e6, 0, 1} {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	return string(b)
}

type contender struct {
	name    string
	command string // the command whose commandstats time is "inside"
	do      func(ctx context.Context, key string) error
}

func main() {
	addr := flag.String("redis", "", "Redis 7 address host:port (required; a server of its own: it is flushed)")
	n := flag.Int("n", 3000, "FCALLs per contender per round")
	rounds := flag.Int("rounds", 9, "rounds, contenders alternating within each")
	loop := flag.Int("loop", 0, "run take this many times inside each FCALL (0: one decision per FCALL, with the probes and the counter)")
	flag.Parse()
	if *addr == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: scriptcost -redis host:port [-loop K] name=take.lua ...")
		os.Exit(2)
	}
	if err := run(*addr, *n, *rounds, *loop, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "scriptcost:", err)
		os.Exit(1)
	}
}

func run(addr string, n, rounds, loop int, files []string) error {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx := context.Background()
	codec, err := os.ReadFile("store/redis/codec.lua")
	if err != nil {
		return fmt.Errorf("%w (run from the repository's root)", err)
	}
	load := func(src string) error {
		return c.Do(ctx, c.B().FunctionLoad().Replace().FunctionCode(src).Build()).Error()
	}
	p := params()
	fcall := func(fn string, args ...string) func(context.Context, string) error {
		return func(ctx context.Context, key string) error {
			return c.Do(ctx, c.B().Fcall().Function(fn).Numkeys(1).Key(key).Arg(args...).Build()).Error()
		}
	}
	var cs []contender
	for _, f := range files {
		name, file, ok := strings.Cut(f, "=")
		if !ok {
			return fmt.Errorf("%q: want name=file", f)
		}
		body, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		lib := "scriptcost_" + name
		src := "#!lua name=" + lib + "\n" + string(codec) + string(body) +
			"\nredis.register_function('" + lib + "', take)" +
			"\nredis.register_function('" + lib + "_loop', function(keys, args)" +
			" local k = {''} for i = 1, tonumber(args[3]) do k[1] = keys[1] .. i take(k, args) end return 'x' end)\n"
		if err := load(src); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if loop > 0 {
			cs = append(cs, contender{name, "fcall", fcall(lib+"_loop", "", p, strconv.Itoa(loop))})
		} else {
			cs = append(cs, contender{name, "fcall", fcall(lib, "", p)})
		}
	}
	if loop == 0 {
		if err := load(probes); err != nil {
			return fmt.Errorf("probes: %w", err)
		}
		for _, fn := range []string{"noop", "time", "mget", "set", "floor"} {
			cs = append(cs, contender{"probe " + fn, "fcall", fcall("scriptcost_" + fn)})
		}
		cs = append(cs, contender{"INCRBY+EXPIRE", "incrby+expire", func(ctx context.Context, key string) error {
			for _, r := range c.DoMulti(ctx, c.B().Incrby().Key(key).Increment(1).Build(), c.B().Expire().Key(key).Seconds(1).Build()) {
				if err := r.Error(); err != nil {
					return err
				}
			}
			return nil
		}})
	}
	per := float64(n * max(loop, 1))
	inside := make([][]float64, len(cs))
	cpu := make([][]float64, len(cs))
	for range rounds {
		for i, ct := range cs {
			if err := c.Do(ctx, c.B().Flushall().Build()).Error(); err != nil {
				return err
			}
			if err := c.Do(ctx, c.B().ConfigResetstat().Build()).Error(); err != nil {
				return err
			}
			c0, err := redisinfo.CPU(ctx, c)
			if err != nil {
				return err
			}
			for range n {
				if err := ct.do(ctx, "rl:{user:u"+strconv.Itoa(rand.IntN(1_000_000_000))+"}:bench"); err != nil {
					return fmt.Errorf("%s: %w", ct.name, err)
				}
			}
			c1, err := redisinfo.CPU(ctx, c)
			if err != nil {
				return err
			}
			// Only the outer commands are counted, not those a script
			// makes inside.
			st, err := redisinfo.Commands(ctx, c, strings.Split(ct.command, "+")...)
			if err != nil {
				return err
			}
			us := 0.0
			for _, x := range st {
				us += x.Usec
			}
			inside[i] = append(inside[i], us/per)
			cpu[i] = append(cpu[i], (c1-c0)*1e6/per)
		}
	}
	what := "one FCALL per decision, sent one after another"
	if loop > 0 {
		what = fmt.Sprintf("%d takes inside each FCALL", loop)
	}
	fmt.Printf("%d rounds of %d FCALLs per contender (%s); µs per decision, median (least)\n", rounds, n, what)
	// Redis CPU against the counter (or, with -loop, the first contender):
	// the median of each round's ratio, rounds being minutes apart at most.
	base, against := len(cs)-1, "÷ INCRBY+EXPIRE"
	if loop > 0 {
		base, against = 0, "÷ "+cs[0].name
	}
	ratios := make([][]float64, len(cs))
	for i := range cs {
		for r := range cpu[i] {
			ratios[i] = append(ratios[i], cpu[i][r]/cpu[base][r])
		}
	}
	fmt.Printf("%-16s %18s %18s   Redis CPU %s, median of the rounds' ratios\n", "contender", "inside Redis", "Redis CPU", against)
	for i, ct := range cs {
		slices.Sort(inside[i])
		slices.Sort(cpu[i])
		slices.Sort(ratios[i])
		fmt.Printf("%-16s %9.2f (%6.2f) %9.2f (%6.2f)   %.2f\n", ct.name, inside[i][len(inside[i])/2], inside[i][0], cpu[i][len(cpu[i])/2], cpu[i][0], ratios[i][len(ratios[i])/2])
	}
	return nil
}
