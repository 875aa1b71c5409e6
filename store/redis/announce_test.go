package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// TestAnnounceHonoursKeyPrefix: the live-instance registry is a key of
// the store's like the buckets, under Config.KeyPrefix, so that two
// deployments sharing a Redis under different prefixes count their own
// instances.
func TestAnnounceHonoursKeyPrefix(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	a := openStore(t, func(c *sredis.Config) { c.KeyPrefix = "a:" }, srv.Addr())
	b := openStore(t, func(c *sredis.Config) { c.KeyPrefix = "b:" }, srv.Addr())
	for _, id := range []string{"one", "two"} {
		if _, err := a.Announce(ctx, id, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	n, err := b.Announce(ctx, "three", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("instances live under prefix b: = %d, want 1 (the two of prefix a: are another deployment's)", n)
	}
	if got := do(t, srv, "exists", "a:instances"); got != "1" {
		t.Errorf("EXISTS a:instances = %s, want 1", got)
	}
}
