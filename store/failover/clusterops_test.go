package failover_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/seam/redisstore"
	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/failover"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// The cluster-operations suite: the operations every Redis Cluster goes
// through, under steady load from three sluice instances over hundreds of
// callers with known limits, on a real 3-master cluster with a replica per
// master. Each run counts the calls admitted over a caller's limit (for
// every pair of admitted calls of one bucket: admitted ≤ capacity + rate ×
// elapsed, elapsed taken from the first call's start to the last one's
// end), the decisions made without Redis, and each shard's breaker
// openings.

const (
	opsInstances = 3
	opsRate      = 400 // calls a second, all instances together
	opsCallers   = 300
	userLimit    = 10 // per 10 s: a capacity of 10, a token a second
	pairLimit    = 20 // the second rule of /api/two: two keys, one hash tag
	budgetLimit  = 3000
)

var opsRules = &rules.Set{Rules: []rules.Rule{
	{ID: "user", Match: rules.Match{Endpoint: "GET /api/*"}, By: rules.ByUser, Limit: userLimit, Window: rules.Duration(10 * time.Second)},
	{ID: "pair", Match: rules.Match{Endpoint: "GET /api/two"}, By: rules.ByUser, Limit: pairLimit, Window: rules.Duration(10 * time.Second)},
	{ID: "budget", Match: rules.Match{Endpoint: "GET /api/budget"}, By: rules.ByGlobal, Limit: budgetLimit, Window: rules.Duration(time.Hour)},
}}

// bucketLimit is the capacity and the refill per second of each rule.
var bucketLimit = map[string][2]float64{
	"user":   {userLimit, userLimit / 10.0},
	"pair":   {pairLimit, pairLimit / 10.0},
	"budget": {budgetLimit, budgetLimit / 3600.0},
}

// opsCall is one call of the load.
type opsCall struct {
	user, path string
	start, end time.Time
	allowed    bool
	source     limiter.Origin
	err        error
	shard      string // the caller's shard when the load started
}

// opsLoad is the steady load of one run.
type opsLoad struct {
	fos      []*failover.Store
	ls       []*limiter.Limiter
	users    []string // weighted: the hot caller many times
	shardOf  map[string]string
	mu       sync.Mutex
	calls    []opsCall
	stop     atomic.Bool
	wg       sync.WaitGroup
	dropped  atomic.Int64
	started  time.Time
	deadline time.Time
}

// startInstances makes three failover stores over the cluster, as three
// sluice instances, each with its own client and denial cache.
func startInstances(t *testing.T, c *redistest.Cluster) ([]*failover.Store, []*limiter.Limiter) {
	t.Helper()
	var fos []*failover.Store
	var ls []*limiter.Limiter
	for range opsInstances {
		cfg := sredis.DefaultConfig()
		cfg.Addrs = c.Addrs()
		cfg.DialTimeout = time.Second
		cfg.Denials = sredis.NewDenialCache()
		fo := failover.New(func(ctx context.Context) (failover.Primary, error) {
			s, err := sredis.New(ctx, cfg)
			if err != nil {
				return nil, err
			}
			return s, nil
		}, failover.Config{Instances: opsInstances, ProbeInterval: 100 * time.Millisecond, Timeout: storeTimeout,
			Logger: testLogger(), Denials: cfg.Denials})
		t.Cleanup(func() { fo.Close() })
		for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
			st, reason := fo.State()
			if st == failover.Closed {
				break
			}
			if time.Since(start) > 10*time.Second {
				t.Fatalf("instance not connected 10 s after start: %s (%s)", st, reason)
			}
		}
		fos = append(fos, fo)
		ls = append(ls, limitertest.Over(t, fo, opsRules))
	}
	return fos, ls
}

// startLoad runs opsRate calls a second over the callers users (each
// call to a random instance: to /api/x, to /api/two — two rules of one
// client — or to /api/budget — a global rule too) until stopped, or for
// at most limit.
func startLoad(t *testing.T, fos []*failover.Store, ls []*limiter.Limiter, users []string, limit time.Duration) *opsLoad {
	t.Helper()
	ld := &opsLoad{fos: fos, ls: ls, users: users, shardOf: map[string]string{}, started: time.Now()}
	ld.deadline = ld.started.Add(limit)
	sh := fos[0].Primary().(*sredis.Store)
	for _, u := range users {
		ld.shardOf[u] = sh.Shard("user:" + u)
	}
	work := make(chan int, 64)
	ld.wg.Add(1)
	go func() { // the pacer
		defer ld.wg.Done()
		defer close(work)
		tick := time.NewTicker(time.Second / 100)
		defer tick.Stop()
		for i := 0; !ld.stop.Load() && time.Now().Before(ld.deadline); {
			<-tick.C
			for range opsRate / 100 {
				select {
				case work <- i:
				default:
					ld.dropped.Add(1)
				}
				i++
			}
		}
	}()
	for w := range 24 {
		ld.wg.Add(1)
		go func() {
			defer ld.wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 28))
			for range work {
				u := users[rnd.IntN(len(users))]
				path := "/api/x"
				switch r := rnd.IntN(10); {
				case r < 3:
					path = "/api/two"
				case r == 3:
					path = "/api/budget"
				}
				in := rnd.IntN(len(ls))
				start := time.Now()
				d, err := ls[in].Check(context.Background(), &limiter.Request{User: u, Method: "GET", Path: path})
				c := opsCall{user: u, path: path, start: start, end: time.Now(), allowed: d.Allowed, source: d.Origin, err: err, shard: ld.shardOf[u]}
				ld.mu.Lock()
				ld.calls = append(ld.calls, c)
				ld.mu.Unlock()
			}
		}()
	}
	return ld
}

// end stops the load and returns its calls.
func (ld *opsLoad) end() []opsCall {
	ld.stop.Store(true)
	ld.wg.Wait()
	return ld.calls
}

// overLimit counts, per bucket, the calls admitted over its limit: the
// most by which any run of admitted calls — from one's start to another's
// end — exceeds capacity + rate × elapsed; and returns their sum and the
// buckets over.
func overLimit(calls []opsCall) (over int, buckets int) {
	type adm struct{ start, end time.Time }
	byBucket := map[string][]adm{}
	for _, c := range calls {
		if c.err != nil || !c.allowed {
			continue
		}
		a := adm{c.start, c.end}
		byBucket["user:"+c.user] = append(byBucket["user:"+c.user], a)
		switch c.path {
		case "/api/two":
			byBucket["pair:"+c.user] = append(byBucket["pair:"+c.user], a)
		case "/api/budget":
			byBucket["budget:"] = append(byBucket["budget:"], a)
		}
	}
	for key, as := range byBucket {
		rule, _, _ := strings.Cut(key, ":")
		capacity, rate := bucketLimit[rule][0], bucketLimit[rule][1]
		sort.Slice(as, func(i, j int) bool { return as[i].start.Before(as[j].start) })
		worst := 0
		for i := range as {
			for j := i; j < len(as); j++ {
				elapsed := as[j].end.Sub(as[i].start).Seconds()
				if elapsed < 0 {
					elapsed = 0
				}
				if n := j - i + 1 - int(capacity+rate*elapsed); n > worst {
					worst = n
				}
			}
		}
		if worst > 0 {
			over += worst
			buckets++
		}
	}
	return over, buckets
}

// opsRun is what one run counted.
type opsRun struct {
	name                  string
	calls, errs           int
	local                 int            // decisions made without Redis
	localByShard          map[string]int // by the caller's shard at the start
	over, overBuckets     int
	openings              map[string]int64 // breaker openings by shard, all instances
	firstLocal, lastLocal time.Time
	dropped               int64
	took                  time.Duration
}

func (r opsRun) String() string {
	var shards []string
	for s, n := range r.openings {
		if n > 0 {
			shards = append(shards, fmt.Sprintf("%s: %d", s, n))
		}
	}
	slices.Sort(shards)
	return fmt.Sprintf("%s: %d calls (%d errors, %d not sent), %d over a limit (%d buckets), %d local decisions %v, breaker openings {%s}, %v",
		r.name, r.calls, r.errs, r.dropped, r.over, r.overBuckets, r.local, r.localByShard, strings.Join(shards, ", "), r.took.Round(100*time.Millisecond))
}

// count sums the calls of a run.
func count(name string, calls []opsCall, fos []*failover.Store, dropped int64, took time.Duration) opsRun {
	r := opsRun{name: name, calls: len(calls), localByShard: map[string]int{}, openings: map[string]int64{}, dropped: dropped, took: took}
	for _, c := range calls {
		if c.err != nil {
			r.errs++
			continue
		}
		if c.source.Degraded() {
			r.local++
			r.localByShard[c.shard]++
			if r.firstLocal.IsZero() || c.start.Before(r.firstLocal) {
				r.firstLocal = c.start
			}
			if c.end.After(r.lastLocal) {
				r.lastLocal = c.end
			}
		}
	}
	r.over, r.overBuckets = overLimit(calls)
	for _, fo := range fos {
		fo.EachShard(func(name string, _ bool, openings, _ int64) { r.openings[name] += openings })
	}
	return r
}

// slotOf is Redis Cluster's hash slot of key (CRC16/XMODEM of its hash
// tag, mod 16384).
func slotOf(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// opsUsers returns the load's callers: opsCallers, of which a sixth have
// their slot in [lo, hi], and the hot caller (hot, in [lo, hi] too) a
// tenth of all calls.
func opsUsers(prefix string, lo, hi int) (users []string, hot string) {
	in := 0
	for i := 0; len(users) < opsCallers; i++ {
		u := fmt.Sprintf("%s-%d", prefix, i)
		s := slotOf("{user:" + u + "}")
		inRange := s >= lo && s <= hi
		if inRange && hot == "" {
			hot = u
			continue
		}
		if inRange && in < opsCallers/6 {
			users = append(users, u)
			in++
		} else if !inRange && len(users)-in < opsCallers*5/6 {
			users = append(users, u)
		}
	}
	for range opsCallers / 9 { // a tenth of the draws
		users = append(users, hot)
	}
	return users, hot
}

// firstSlots returns the lowest n slots a master serves.
func firstSlots(t *testing.T, m *redistest.Server, n int) (lo, hi int) {
	t.Helper()
	out, err := m.Do("cluster", "nodes")
	if err != nil {
		t.Fatal(err)
	}
	lo = -1
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.Contains(f[2], "myself") {
			continue
		}
		for _, r := range f[8:] {
			a, b, ok := strings.Cut(r, "-")
			if !ok {
				b = a
			}
			x, err1 := strconv.Atoi(a)
			y, err2 := strconv.Atoi(b)
			if err1 == nil && err2 == nil && (lo < 0 || x < lo) {
				lo, hi = x, y
			}
		}
	}
	if lo < 0 {
		t.Fatalf("%s serves no slot", m.Addr())
	}
	return lo, min(hi, lo+n-1)
}

// fill writes n keys spread over slots [lo, hi] through fo's client.
func fill(t *testing.T, fo *failover.Store, lo, hi, n int) {
	t.Helper()
	cl := redisstore.Client(fo.Primary().(*sredis.Store))
	ctx := context.Background()
	for i, done := 0, 0; done < n; i++ {
		k := "fill:{" + strconv.Itoa(i) + "}"
		if s := slotOf(k); s < lo || s > hi {
			continue
		}
		if err := cl.Do(ctx, cl.B().Set().Key(k).Value("x").Build()).Error(); err != nil {
			t.Fatalf("fill: %v", err)
		}
		done++
	}
}

// replicaOf returns the replica of master m.
func replicaOf(t *testing.T, c *redistest.Cluster, m *redistest.Server) *redistest.Server {
	t.Helper()
	id := m.ID(t)
	for _, n := range c.Nodes {
		if n == m {
			continue
		}
		if out, err := n.Do("cluster", "nodes"); err == nil {
			for _, line := range strings.Split(out, "\n") {
				f := strings.Fields(line)
				if len(f) > 3 && strings.Contains(f[2], "myself") && strings.Contains(f[2], "slave") && f[3] == id {
					return n
				}
			}
		}
	}
	t.Fatalf("no replica of %s", m.Addr())
	return nil
}

func TestClusterOperations(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a Redis Cluster of 6 nodes under load")
	}
	c := redistest.StartCluster(t, 3, 1)
	var results []opsRun
	// run starts three instances, the load over callers of the slots
	// [lo, hi], lets it settle, runs op, lets the load run after for
	// settle, and counts.
	run := func(t *testing.T, name string, lo, hi int, op func(fos []*failover.Store, hot string), after time.Duration) opsRun {
		t.Helper()
		fos, ls := startInstances(t, c)
		users, hot := opsUsers(name, lo, hi)
		start := time.Now()
		ld := startLoad(t, fos, ls, users, 60*time.Second)
		time.Sleep(time.Second)
		op(fos, hot)
		time.Sleep(after)
		calls := ld.end()
		r := count(name, calls, fos, ld.dropped.Load(), time.Since(start))
		t.Log(r)
		results = append(results, r)
		if r.errs > 0 {
			t.Errorf("%s: %d decisions failed, want every one answered", name, r.errs)
		}
		return r
	}
	exact := func(t *testing.T, r opsRun) {
		t.Helper()
		var opened int64
		for _, n := range r.openings {
			opened += n
		}
		if r.over > 0 || r.local > 0 || opened > 0 {
			t.Errorf("%s: %d calls over a limit, %d local decisions, %d breaker openings; want 0, 0, 0", r.name, r.over, r.local, opened)
		}
	}

	t.Run("pause", func(t *testing.T) {
		m := c.Masters()[0]
		lo, hi := firstSlots(t, m, 100)
		exact(t, run(t, "pause", lo, hi, func([]*failover.Store, string) {
			pauseSelf(t, 0, 1500*time.Millisecond).Wait()
		}, time.Second))
	})

	t.Run("reshard", func(t *testing.T) {
		ms := c.Masters()
		from, to := ms[1], ms[0]
		lo, hi := firstSlots(t, from, 100)
		exact(t, run(t, "reshard", lo, hi, func(fos []*failover.Store, hot string) {
			fill(t, fos[0], lo, hi, 3000)
			out, err := redistestCLI("--cluster", "reshard", from.Addr(), "--cluster-from", from.ID(t), "--cluster-to", to.ID(t),
				"--cluster-slots", strconv.Itoa(hi-lo+1), "--cluster-yes")
			if err != nil {
				t.Fatalf("redis-cli --cluster reshard: %v\n%s", err, out)
			}
			if n := c.MasterOf(t, "{user:"+hot+"}"); n != to {
				t.Fatalf("the hot caller's slot is on %s after the reshard, want %s", n.Addr(), to.Addr())
			}
			keys, _ := to.Do("cluster", "countkeysinslot", strconv.Itoa(lo))
			t.Logf("reshard: slots %d-%d moved, %s keys in slot %d now on the target", lo, hi, keys, lo)
		}, time.Second))
	})

	t.Run("migrating", func(t *testing.T) {
		ms := c.Masters()
		from, to := ms[2], ms[1]
		lo, hi := firstSlots(t, from, 1)
		exact(t, run(t, "migrating", lo, hi, func(fos []*failover.Store, _ string) {
			c.BeginMigration(t, lo, from, to)
			time.Sleep(10 * time.Second)
			c.MoveKeys(t, lo, from, to)
			c.EndMigration(t, lo, from, to)
		}, time.Second))
	})

	t.Run("failover", func(t *testing.T) {
		m := c.Masters()[0]
		lo, hi := firstSlots(t, m, 100)
		exact(t, run(t, "failover", lo, hi, func([]*failover.Store, string) {
			r := replicaOf(t, c, m)
			if out, err := r.Do("cluster", "failover"); err != nil || out != "OK" {
				t.Fatalf("cluster failover on %s: %v %s", r.Addr(), err, out)
			}
			for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
				if role, _ := r.Do("role"); strings.HasPrefix(role, "master") {
					break
				}
				if time.Since(start) > 10*time.Second {
					t.Fatalf("%s not master 10 s after CLUSTER FAILOVER", r.Addr())
				}
			}
		}, 2*time.Second))
	})

	t.Run("kill", func(t *testing.T) {
		m := c.Masters()[1]
		lo, hi := firstSlots(t, m, 100)
		var killed, promoted time.Time
		replica := replicaOf(t, c, m)
		r := run(t, "kill", lo, hi, func(fos []*failover.Store, hot string) {
			killed = time.Now()
			m.Kill()
			key := "{user:" + hot + "}"
			for ; ; time.Sleep(20 * time.Millisecond) {
				if n, err := c.Master(key); err == nil && n != m && c.Agreed(key, m) {
					promoted = time.Now()
					break
				}
				if time.Since(killed) > 30*time.Second {
					t.Fatal("replica not promoted within 30 s")
				}
			}
		}, 3*time.Second)
		healthy := 0
		for shard, n := range r.localByShard {
			if shard != m.Addr() {
				healthy += n
			}
		}
		var opened []string
		for shard, n := range r.openings {
			if n > 0 && shard != m.Addr() && shard != replica.Addr() {
				opened = append(opened, shard)
			}
		}
		t.Logf("kill: promoted %v after the kill; local decisions from %v to %v after it (%v after the promotion)",
			promoted.Sub(killed).Round(time.Millisecond), r.firstLocal.Sub(killed).Round(time.Millisecond),
			r.lastLocal.Sub(killed).Round(time.Millisecond), r.lastLocal.Sub(promoted).Round(time.Millisecond))
		if healthy > 0 || len(opened) > 0 {
			t.Errorf("kill: %d local decisions for callers of the healthy shards, breakers opened on %v (killed %s, its replica %s); want none",
				healthy, opened, m.Addr(), replica.Addr())
		}
		if !r.lastLocal.IsZero() && r.lastLocal.Sub(promoted) > 2*time.Second {
			t.Errorf("kill: local decisions until %v after the promotion, want at most 2 s", r.lastLocal.Sub(promoted).Round(time.Millisecond))
		}
	})

	var b strings.Builder
	for _, r := range results {
		fmt.Fprintln(&b, r)
	}
	t.Logf("cluster operations:\n%s", b.String())
}

// redistestCLI runs redis-cli with args.
func redistestCLI(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput()
	return string(out), err
}
