package redis_test

import (
	"testing"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/testkit/conformance"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/limiter"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// TestRefundErrorsCounted: a cross-shard give-back that fails is counted
// (RefundErrors), not dropped, and never tried again blindly: a refund
// whose answer was lost may have run, and a second one would give the
// caller back more than it took. Here every node refuses EVALSHA and EVAL
// (an ACL), which the give-back needs, while FCALL, which decides, works.
func TestRefundErrorsCounted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	c := redistest.StartCluster(t, 3, 0)
	s := openStore(t, func(cfg *sredis.Config) { cfg.NoDenialCache = true }, c.Addrs()...)
	user, ip := apart(t, c, s, "refund", "per-user", "per-ip")
	for _, n := range c.Nodes {
		do(t, n, "acl", "setuser", "default", "-evalsha", "-eval")
	}
	t.Cleanup(func() {
		for _, n := range c.Nodes {
			n.Do("acl", "setuser", "default", "+@all")
		}
	})
	ops := []limiter.Op{
		{Client: user, Rule: "per-user", Params: paramsOf(algorithm.TokenBucket, 5, conformance.Hour), Cost: 1},
		{Client: ip, Rule: "per-ip", Params: paramsOf(algorithm.TokenBucket, 1, conformance.Hour), Cost: 1},
	}
	take(t, s, ops...) // the ip's one call
	res, _ := take(t, s, ops...)
	if res[1].Allowed {
		t.Fatalf("second call: per-ip %+v, want denied (limit 1)", res[1])
	}
	if got := s.RefundErrors(); got != 1 {
		t.Errorf("RefundErrors after a give-back that failed = %d, want 1", got)
	}
}
