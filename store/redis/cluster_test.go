package redis_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/seam/redisstore"
	"github.com/sluicehq/sluice/internal/testkit/conformance"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/limiter"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// TestNoScript: a server that lost the scripts (SCRIPT FLUSH, as after a
// restart or a failover) still decides: EVALSHA fails with NOSCRIPT and the
// store falls back to EVAL, which loads the script again.
func TestNoScript(t *testing.T) {
	srv := redistest.Start(t)
	for _, batch := range []int{1, 64} {
		t.Run(fmt.Sprintf("max_batch=%d", batch), func(t *testing.T) {
			s := openStore(t, func(c *sredis.Config) { c.MaxBatch = batch; c.NoDenialCache = true; c.Evalsha = true }, srv.Addr())
			checkPath(t, s, "EVALSHA")
			op := limiter.Op{Client: fmt.Sprintf("user:noscript-%d", batch), Rule: "r",
				Params: paramsOf(algorithm.TokenBucket, 100, conformance.Hour), Cost: 1}
			for call := 1; call <= 3; call++ {
				do(t, srv, "script", "flush")
				_, eval0 := scriptCalls(t, srv)
				res, _ := take(t, s, op)
				if !res[0].Allowed || res[0].Remaining != int64(100-call) {
					t.Fatalf("call %d after SCRIPT FLUSH = %+v, want allowed, remaining %d", call, res[0], 100-call)
				}
				if _, eval1 := scriptCalls(t, srv); eval1 != eval0+1 {
					t.Fatalf("EVAL calls after SCRIPT FLUSH = %d, want %d (the fallback)", eval1, eval0+1)
				}
			}
			// Concurrent calls right after a flush: every one falls back or
			// finds the script that another's EVAL loaded.
			do(t, srv, "script", "flush")
			take64(t, s, op, fmt.Sprintf("noscript-%d", batch), "SCRIPT FLUSH")
		})
	}
}

// TestNoFunction: a server that lost the function library (FUNCTION
// FLUSH, as after a restart or a failover to a node that never had it)
// still decides: FCALL answers "Function not found", the store loads the
// library again and retries, and later calls are FCALLs again, with no
// EVAL.
func TestNoFunction(t *testing.T) {
	srv := redistest.Start(t)
	for _, batch := range []int{1, 64} {
		t.Run(fmt.Sprintf("max_batch=%d", batch), func(t *testing.T) {
			s := openStore(t, func(c *sredis.Config) { c.MaxBatch = batch; c.NoDenialCache = true }, srv.Addr())
			checkPath(t, s, "FCALL")
			op := limiter.Op{Client: fmt.Sprintf("user:nofunction-%d", batch), Rule: "r",
				Params: paramsOf(algorithm.TokenBucket, 100, conformance.Hour), Cost: 1}
			calls := 0
			for round := 1; round <= 3; round++ {
				do(t, srv, "function", "flush")
				if got := do(t, srv, "function", "list"); got != "" {
					t.Fatalf("FUNCTION LIST after FUNCTION FLUSH = %q, want empty", got)
				}
				fcall0, eval0 := commandCalls(t, srv, "fcall"), commandCalls(t, srv, "eval")
				for range 2 {
					calls++
					res, _ := take(t, s, op)
					if !res[0].Allowed || res[0].Remaining != int64(100-calls) {
						t.Fatalf("call %d after FUNCTION FLUSH = %+v, want allowed, remaining %d", calls, res[0], 100-calls)
					}
				}
				checkReloaded(t, srv, "sluice_take_", fcall0, eval0, 3, "one answered \"Function not found\", the retry, the next call")
			}
			// Concurrent calls right after a flush: every one reloads the
			// library or finds the one another loaded.
			do(t, srv, "function", "flush")
			take64(t, s, op, fmt.Sprintf("nofunction-%d", batch), "FUNCTION FLUSH")
		})
	}
}

// TestCluster runs the cluster cases on one 3-master Redis Cluster.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	c := redistest.StartCluster(t, 3, 0)
	t.Run("cross_shard_all_or_nothing", func(t *testing.T) { testCrossShard(t, c) })
	t.Run("same_client_one_script", func(t *testing.T) { testSameClientOneScript(t, c) })
	t.Run("cross_shard_peek", func(t *testing.T) { testCrossShardPeek(t, c) })
	t.Run("noscript", func(t *testing.T) { testClusterNoScript(t, c) })
	t.Run("nofunction", func(t *testing.T) { testClusterNoFunction(t, c) })
	t.Run("addrs_untouched", func(t *testing.T) { testAddrsUntouched(t, c) })
}

// testAddrsUntouched: New leaves the caller's address list as it was. The
// Redis client shuffles the list it is given; when that was the caller's
// own slice, a failover store reconnecting with the same Config raced the
// old client's topology refresh, which still read it.
func testAddrsUntouched(t *testing.T, c *redistest.Cluster) {
	addrs := c.Addrs()
	want := slices.Clone(addrs)
	for range 8 { // a shuffle of 3 keeps their order 1 time in 6
		openStore(t, nil, addrs...)
		if !slices.Equal(addrs, want) {
			t.Fatalf("New reordered Config.Addrs: %v, was %v", addrs, want)
		}
	}
}

// apart returns a user and an ip client whose keys of rules userRule and
// ipRule live on different masters.
func apart(t *testing.T, c *redistest.Cluster, s *sredis.Store, prefix, userRule, ipRule string) (user, ip string) {
	t.Helper()
	for i := range 50 {
		user = fmt.Sprintf("user:%s-%d", prefix, i)
		ip = fmt.Sprintf("ip:198.51.100.%d", i)
		if c.MasterOf(t, redisstore.Key(s, user, userRule)) != c.MasterOf(t, redisstore.Key(s, ip, ipRule)) {
			return user, ip
		}
	}
	t.Fatal("no user and ip on different masters in 50 tries")
	return "", ""
}

// keyState returns what the store keeps under key on srv: the string value,
// or a sorted set's scores.
func keyState(t *testing.T, srv *redistest.Server, key string) string {
	t.Helper()
	if typ := do(t, srv, "type", key); typ == "zset" {
		out := do(t, srv, "zrange", key, "0", "-1", "withscores")
		var scores []string
		for i, f := range strings.Split(out, "\n") {
			if i%2 == 1 {
				scores = append(scores, f)
			}
		}
		return "zset " + strings.Join(scores, " ")
	}
	return do(t, srv, "get", key)
}

// testCrossShard: a per-user rule (limit 5) and a per-ip rule (limit 2) whose
// keys live on different masters. Once the ip bucket is empty, every call is
// denied and the user's bucket, taken from by its own shard's script, is
// given back exactly: its stored state is what it was, and a call through
// another ip sees 5 − 3 remaining.
func testCrossShard(t *testing.T, c *redistest.Cluster) {
	for _, k := range algorithm.Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			_, s := openClocked(t, nil, c.Addrs()...)
			userP := paramsOf(k, 5, conformance.Hour)
			ipP := paramsOf(k, 2, conformance.Hour)
			if k == algorithm.LeakyBucket {
				userP.Burst = 4 // capacity 5 and 2, like the others
			}
			if k == algorithm.TokenBucket {
				// capacity 5, a token of 1,200,000,000⅓ µs: the refund
				// gives back a remainder in 1/limit µs exactly
				userP = algorithm.Params{Kind: k, Limit: 3, Window: conformance.Hour + 1, Burst: 5}
			}
			user, ip := apart(t, c, s, "xshard-"+k.String(), "per-user", "per-ip")
			userKey := redisstore.Key(s, user, "per-user")
			userMaster := c.MasterOf(t, userKey)
			call := func(ip string) []algorithm.Result {
				res, _ := take(t, s,
					limiter.Op{Client: user, Rule: "per-user", Params: userP, Cost: 1},
					limiter.Op{Client: ip, Rule: "per-ip", Params: ipP, Cost: 1})
				return res
			}
			for i := range 2 {
				if res := call(ip); !res[0].Allowed || !res[1].Allowed {
					t.Fatalf("call %d = %+v, want both allowed", i+1, res)
				}
			}
			before := keyState(t, userMaster, userKey)
			for i := range 5 {
				res := call(ip)
				if res[1].Allowed {
					t.Fatalf("call %d: per-ip = %+v, want denied (limit 2)", i+3, res[1])
				}
				if after := keyState(t, userMaster, userKey); after != before {
					t.Fatalf("call %d denied by the ip: user bucket %q, want %q as before", i+3, after, before)
				}
			}
			if k == algorithm.SlidingLog {
				if n := do(t, userMaster, "zcard", userKey); n != "2" {
					t.Fatalf("user log has %s entries, want 2", n)
				}
			}
			// Through another ip the user still has 5 − 2 − 1.
			res := call("ip:203.0.113.250")
			if !res[0].Allowed || res[0].Remaining != 2 {
				t.Fatalf("call through another ip: per-user = %+v, want allowed, remaining 2", res[0])
			}
		})
	}
}

// testSameClientOneScript: two rules of one client are one script on the
// client's shard — one EVALSHA per call, no give-back — and all or nothing.
func testSameClientOneScript(t *testing.T, c *redistest.Cluster) {
	_, s := openClocked(t, nil, c.Addrs()...)
	user := "user:same-client"
	master := c.MasterOf(t, redisstore.Key(s, user, "a"))
	a := limiter.Op{Client: user, Rule: "a", Params: paramsOf(algorithm.TokenBucket, 5, conformance.Hour), Cost: 1}
	b := limiter.Op{Client: user, Rule: "b", Params: paramsOf(algorithm.FixedWindow, 2, conformance.Hour), Cost: 1}
	for i := range 6 {
		sha0, eval0 := scriptCalls(t, master)
		res, _ := take(t, s, a, b)
		sha1, eval1 := scriptCalls(t, master)
		if got := sha1 + eval1 - sha0 - eval0; got != 1 {
			t.Fatalf("call %d ran %d scripts on the client's master, want 1", i+1, got)
		}
		if wantB := i < 2; res[1].Allowed != wantB {
			t.Fatalf("call %d: rule b = %+v, want allowed %v", i+1, res[1], wantB)
		}
		// Rule a's answer is as if taken; a denied call takes nothing, so
		// from the third call on it stays 5 − 2 − 1.
		if want := int64(5 - min(i, 2) - 1); !res[0].Allowed || res[0].Remaining != want {
			t.Fatalf("call %d: rule a = %+v, want allowed, remaining %d", i+1, res[0], want)
		}
	}
	if res, _ := take(t, s, a); !res[0].Allowed || res[0].Remaining != 2 {
		t.Fatalf("rule a alone = %+v, want allowed, remaining 2", res[0])
	}
}

// clientPerMaster returns, for each of c's three masters, a client named
// prefix<n> whose bucket of rule "r" s keeps on that master.
func clientPerMaster(t *testing.T, c *redistest.Cluster, s *sredis.Store, prefix string) map[*redistest.Server]string {
	t.Helper()
	found := map[*redistest.Server]string{}
	for i := 0; len(found) < 3 && i < 100; i++ {
		client := prefix + strconv.Itoa(i)
		if master := c.MasterOf(t, redisstore.Key(s, client, "r")); found[master] == "" {
			found[master] = client
		}
	}
	if len(found) != 3 {
		t.Fatalf("reached %d masters, want 3", len(found))
	}
	return found
}

// takeThree makes three calls of client on a token bucket of 10 an hour and
// fails the test unless each is allowed, with one fewer remaining.
func takeThree(t *testing.T, s *sredis.Store, client string, master *redistest.Server) {
	t.Helper()
	op := limiter.Op{Client: client, Rule: "r", Params: paramsOf(algorithm.TokenBucket, 10, conformance.Hour), Cost: 1}
	for call := 1; call <= 3; call++ {
		if res, _ := take(t, s, op); !res[0].Allowed || res[0].Remaining != int64(10-call) {
			t.Fatalf("%s on %s, call %d = %+v, want allowed, remaining %d", client, master.Addr(), call, res[0], 10-call)
		}
	}
}

// testClusterNoScript: a master that never had the scripts (flushed after
// the store loaded them everywhere) still decides, through EVAL.
func testClusterNoScript(t *testing.T, c *redistest.Cluster) {
	s := openStore(t, func(cfg *sredis.Config) { cfg.NoDenialCache = true; cfg.Evalsha = true }, c.Addrs()...)
	checkPath(t, s, "EVALSHA")
	for master, client := range clientPerMaster(t, c, s, "user:noscript-") {
		do(t, master, "script", "flush")
		_, eval0 := scriptCalls(t, master)
		takeThree(t, s, client, master)
		if _, eval1 := scriptCalls(t, master); eval1 != eval0+1 {
			t.Fatalf("EVAL on %s = %d, want %d: one fallback, then EVALSHA", master.Addr(), eval1, eval0+1)
		}
	}
}

// testClusterNoFunction: a master without the function library (flushed
// after the store loaded it on every master, as a replica promoted after
// the store started would be) still decides: the library is loaded again
// and the calls are FCALLs, with no EVAL.
func testClusterNoFunction(t *testing.T, c *redistest.Cluster) {
	s := openStore(t, func(cfg *sredis.Config) { cfg.NoDenialCache = true }, c.Addrs()...)
	checkPath(t, s, "FCALL")
	for master, client := range clientPerMaster(t, c, s, "user:nofunction-") {
		if got := do(t, master, "function", "list"); !strings.Contains(got, "sluice_take_") {
			t.Fatalf("FUNCTION LIST on master %s = %q, want the library, loaded at start", master.Addr(), got)
		}
		do(t, master, "function", "flush")
		fcall0, eval0 := commandCalls(t, master, "fcall"), commandCalls(t, master, "eval")
		takeThree(t, s, client, master)
		if n := commandCalls(t, master, "fcall") - fcall0; n != 4 {
			t.Fatalf("FCALL on %s = %d, want 4: one answered \"Function not found\", then the library loaded again and three runs", master.Addr(), n)
		}
		if n := commandCalls(t, master, "eval") - eval0; n != 0 {
			t.Fatalf("EVAL on %s = %d, want 0", master.Addr(), n)
		}
	}
}

// TestNoFunctions: a server without Redis functions (FUNCTION renamed
// away, as on a server older than 7 or a managed service that forbids it)
// gets take.lua by EVALSHA, chosen at start, and decides.
func TestNoFunctions(t *testing.T) {
	srv := redistest.Start(t, "--rename-command", "FUNCTION", "")
	if out, err := srv.Do("function", "list"); err == nil && !strings.Contains(out, "unknown command") {
		t.Fatalf("FUNCTION LIST on a server without FUNCTION = %q, want an unknown command", out)
	}
	s := openStore(t, func(c *sredis.Config) { c.NoDenialCache = true }, srv.Addr())
	checkPath(t, s, "EVALSHA")
	op := limiter.Op{Client: "user:nofunctions", Rule: "r", Params: paramsOf(algorithm.TokenBucket, 3, conformance.Hour), Cost: 1}
	sha0, _ := scriptCalls(t, srv)
	for call := 1; call <= 4; call++ {
		res, _ := take(t, s, op)
		if want := call <= 3; res[0].Allowed != want {
			t.Fatalf("call %d = %+v, want allowed %v", call, res[0], want)
		}
	}
	if n := commandCalls(t, srv, "fcall"); n != 0 {
		t.Fatalf("FCALL calls = %d, want 0", n)
	}
	if sha1, _ := scriptCalls(t, srv); sha1-sha0 != 4 {
		t.Fatalf("EVALSHA runs = %d, want 4", sha1-sha0)
	}
}

// take64 makes 64 concurrent calls of op, each for its own client
// (user:<prefix>-<n>), right after what (a flush) and wants every one
// allowed, none failed.
func take64(t *testing.T, s *sredis.Store, op limiter.Op, prefix, what string) {
	t.Helper()
	got := takeConcurrently(t, s, 64, 1, func(g int) []limiter.Op {
		op := op
		op.Client = fmt.Sprintf("user:%s-%d", prefix, g)
		return []limiter.Op{op}
	})
	if got != 64 {
		t.Fatalf("allowed after %s = %d, want 64", what, got)
	}
}

// testCrossShardPeek: a call that reads one bucket (cost 0, Envoy's
// hits_addend 0) and takes from another on a different master: the read
// bucket's state never changes, whether the call is allowed or denied by
// the other shard (nothing to give back), and a peek creates no key.
func testCrossShardPeek(t *testing.T, c *redistest.Cluster) {
	for _, k := range algorithm.Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			_, s := openClocked(t, nil, c.Addrs()...)
			userP, ipP := paramsOf(k, 5, conformance.Hour), paramsOf(k, 2, conformance.Hour)
			user, ip := apart(t, c, s, "peek-"+k.String(), "per-user", "per-ip")
			userKey := redisstore.Key(s, user, "per-user")
			userMaster := c.MasterOf(t, userKey)
			peek := func() []algorithm.Result {
				res, _ := take(t, s,
					limiter.Op{Client: user, Rule: "per-user", Params: userP, Cost: 0},
					limiter.Op{Client: ip, Rule: "per-ip", Params: ipP, Cost: 1})
				return res
			}
			if res := peek(); !res[0].Allowed || res[0].Remaining != userP.Capacity() {
				t.Fatalf("first peek = %+v, want allowed with %d remaining", res[0], userP.Capacity())
			}
			if n := do(t, userMaster, "exists", userKey); n != "0" {
				t.Fatalf("exists %s after a peek = %s, want 0", userKey, n)
			}
			take(t, s, limiter.Op{Client: user, Rule: "per-user", Params: userP, Cost: 1})
			before := keyState(t, userMaster, userKey)
			for i := range 4 { // the second takes ip's last; then it denies
				res := peek()
				if res[1].Allowed != (i < 1) {
					t.Fatalf("peek %d: per-ip = %+v, want allowed %v", i+2, res[1], i < 1)
				}
				if !res[0].Allowed || res[0].Remaining != userP.Capacity()-1 {
					t.Fatalf("peek %d: per-user = %+v, want allowed with %d remaining", i+2, res[0], userP.Capacity()-1)
				}
				if after := keyState(t, userMaster, userKey); after != before {
					t.Fatalf("peek %d: user bucket %q, want %q as before", i+2, after, before)
				}
			}
		})
	}
}

// BenchmarkClusterTake: calls of two rules of one client (one script on
// its shard) on a 3-master Redis Cluster, 32 in flight; the bytes and
// allocations each call costs this process.
func BenchmarkClusterTake(b *testing.B) {
	c := redistest.StartCluster(b, 3, 0)
	s := openStore(b, nil, c.Addrs()...)
	p := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 1e6, Window: 1e6}
	var n atomic.Int64
	b.SetParallelism(16)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		ops := []limiter.Op{{Rule: "a", Cost: 1, Params: p}, {Rule: "b", Cost: 1, Params: p}}
		res := make([]algorithm.Result, 2)
		i := n.Add(1_000_000)
		for pb.Next() {
			i++
			client := fmt.Sprintf("user:%d", i%100_000)
			ops[0].Client, ops[1].Client = client, client
			if _, err := s.Take(ctx, ops, res); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
