package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/seam/redisstore"
	"github.com/sluicehq/sluice/internal/testkit/conformance"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/limiter"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// TestClusterMigration: a slot being moved between masters is the cluster
// working, not failing. While the slot is MIGRATING its source answers ASK
// for a key it no longer (or never) had, and its target TRYAGAIN for a
// script of several keys it does not all hold; the store follows the one
// and gets past the other, and its probe follows redirects too, so that
// neither looks like a Redis that fails.
func TestClusterMigration(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	c := redistest.StartCluster(t, 3, 0)
	s := openStore(t, func(cfg *sredis.Config) { cfg.NoDenialCache = true }, c.Addrs()...)
	ctx := context.Background()
	// migrating starts moving the slot of client's keys to another master
	// and finishes the move when the test ends.
	migrating := func(t *testing.T, client string) (from, to *redistest.Server) {
		slot := c.Slot(t, redisstore.Key(s, client, "r1"))
		from = c.MasterOf(t, redisstore.Key(s, client, "r1"))
		for _, m := range c.Masters() {
			if m != from {
				to = m
				break
			}
		}
		c.BeginMigration(t, slot, from, to)
		t.Cleanup(func() {
			c.MoveKeys(t, slot, from, to)
			c.EndMigration(t, slot, from, to)
		})
		return from, to
	}
	params := paramsOf(algorithm.TokenBucket, 5, conformance.Hour)

	t.Run("probe", func(t *testing.T) {
		// The probe reads a key its source does not have: ASK.
		client := "user:mig-probe"
		_, to := migrating(t, client)
		if err := s.Probe(ctx, client); err != nil {
			t.Fatalf("Probe(%s) while its slot is migrating: %v, want nil (the redirect followed)", client, err)
		}
		// Once the slot has moved, the probes' connection to the old
		// master is answered MOVED.
		key := redisstore.Key(s, client, "r1")
		slot, from := c.Slot(t, key), c.MasterOf(t, key)
		c.MoveKeys(t, slot, from, to)
		c.EndMigration(t, slot, from, to)
		if err := s.Probe(ctx, client); err != nil {
			t.Fatalf("Probe(%s) after its slot moved: %v, want nil (the redirect followed)", client, err)
		}
	})

	t.Run("two_keys", func(t *testing.T) {
		// A caller with two rules, one of whose keys exists: the source
		// answers ASK (a key is missing), the target TRYAGAIN (it has
		// neither). Each call is still decided by Redis, exactly.
		client := "user:mig-two"
		one := []limiter.Op{{Client: client, Rule: "r1", Params: params, Cost: 1}}
		two := append(one[:1:1], limiter.Op{Client: client, Rule: "r2", Params: params, Cost: 1})
		take(t, s, one...) // r1: 4 left
		migrating(t, client)
		allowed := 0
		for i := range 6 {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			res := make([]algorithm.Result, 2)
			_, err := s.Take(cctx, two, res)
			cancel()
			if err != nil {
				t.Fatalf("call %d of two keys while the slot migrates: %v, want a decision", i+1, err)
			}
			if res[0].Allowed {
				allowed++
			}
			if res[0].Allowed != res[1].Allowed && res[0].Allowed {
				t.Fatalf("call %d: %+v, want all or nothing", i+1, res)
			}
		}
		if allowed != 4 {
			t.Fatalf("calls of two keys allowed while the slot migrates = %d, want 4 (r1's remaining)", allowed)
		}
	})
}

// TestShard: each client's shard is the master serving its slot, by
// CLUSTER SLOTS; on a standalone server there is one shard, "".
func TestShard(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	c := redistest.StartCluster(t, 3, 0)
	s := openStore(t, nil, c.Addrs()...)
	seen := map[string]bool{}
	for i := range 30 {
		client := "user:shard-" + string(rune('a'+i))
		want := c.MasterOf(t, redisstore.Key(s, client, "r")).Addr()
		if got := s.Shard(client); got != want {
			t.Fatalf("Shard(%s) = %q, want %q (CLUSTER KEYSLOT and NODES)", client, got, want)
		}
		seen[want] = true
	}
	if len(seen) != 3 {
		t.Errorf("30 clients on %d shards, want 3", len(seen))
	}
	srv := redistest.Start(t)
	if got := openStore(t, nil, srv.Addr()).Shard("user:a"); got != "" {
		t.Errorf("Shard on a standalone server = %q, want \"\"", got)
	}
}
