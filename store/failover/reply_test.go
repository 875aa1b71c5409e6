package failover_test

import (
	"context"
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/seam/redisstore"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store/failover"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// TestUnreadableReplyFailsThatCallOnly: when Redis answers a call with
// values sluice cannot read (here: a bucket whose stored state holds a NaN,
// which take.lua turns into a NaN remaining), that call is decided as while
// the store is unavailable and nothing else changes: the breaker stays
// closed and every other caller is still decided by Redis (once, one such
// reply opened the breaker for the whole instance for 394 ms).
func TestUnreadableReplyFailsThatCallOnly(t *testing.T) {
	_, fo, l := startFailover(t, nil)
	ctx := context.Background()
	req := limiter.Request{User: "broken", Method: "GET", Path: "/api/orders"}
	if d, err := l.Check(ctx, &req); err != nil || d.Origin != limiter.OriginStore {
		t.Fatalf("first call: %+v, %v; want decided by Redis", d, err)
	}
	// The token bucket's state: kind byte 17, F (µs after 2020-09-13), its
	// remainder (NaN) and the limit the remainder counts in.
	state := []byte{17}
	f := float64(time.Now().UnixMicro()-1_600_000_000_000_000) + 1e6 // a second of debt
	for _, v := range []float64{f, math.NaN(), 600} {
		state = binary.LittleEndian.AppendUint64(state, math.Float64bits(v))
	}
	c := fo.Primary().(*sredis.Store)
	key := redisstore.Key(c, "user:broken", "open")
	if err := redisstore.Client(c).Do(ctx, redisstore.Client(c).B().Set().Key(key).Value(string(state)).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		d, err := l.Check(ctx, &req)
		if err != nil {
			t.Fatalf("call %d with an unreadable reply: %v; want a decision", i+1, err)
		}
		if d.Origin != limiter.OriginLocalFallback {
			t.Fatalf("call %d with an unreadable reply: %+v; want decided by the local fallback", i+1, d)
		}
		if st, why := fo.State(); st != failover.Closed {
			t.Fatalf("after %d unreadable replies the breaker is %v (%s); want closed", i+1, st, why)
		}
	}
	d, err := l.Check(ctx, &limiter.Request{User: "healthy", Method: "GET", Path: "/api/orders"})
	if err != nil || d.Origin != limiter.OriginStore {
		t.Fatalf("another caller: %+v, %v; want decided by Redis", d, err)
	}
}
