package redis_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/seam/redisstore"
	"github.com/sluicehq/sluice/internal/testkit/conformance"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// packed is struct.pack('<B' + 'd'*len(vs), kind, vs...).
func packed(kind byte, vs ...float64) string {
	b := []byte{kind}
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	return string(b)
}

// epoch is the scripts' EPOCH (codec.lua), in µs.
const epoch = 1_600_000_000_000_000

// TestEarlierStates: states written by the scripts before times became
// relative to 2020-09-13 (absolute µs; a token bucket's F in ns; a sliding
// log with one member per unit) are read as they were meant — a fraction
// of a µs of debt rounded up — and decided as the Go function decides from
// that state.
func TestEarlierStates(t *testing.T) {
	srv := redistest.Start(t)
	var clock atomic.Int64
	s := newStore(t, &clock, srv.Addr())
	c := redisstore.Client(s)
	ctx := context.Background()
	now := conformance.Base + 30*conformance.Second
	F := now + 700_000 // full again 0.7 s from now, and 500 ns
	tb := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 3, Window: conformance.Second}
	lb := algorithm.Params{Kind: algorithm.LeakyBucket, Limit: 3, Window: conformance.Second, Burst: 2}
	fw := algorithm.Params{Kind: algorithm.FixedWindow, Limit: 2000, Window: conformance.Minute}
	sw := algorithm.Params{Kind: algorithm.SlidingWindow, Limit: 10, Window: conformance.Second}
	start := now - now%conformance.Second
	cases := []struct {
		name string
		p    algorithm.Params
		set  string
		st   algorithm.State
	}{
		{"token_bucket decimal, F in ns", tb, fmt.Sprintf("1%015d%03d", F-epoch, 500), algorithm.State{T: F + 1}},
		{"token_bucket packed, F in ns", tb, packed(1, float64(F), 500), algorithm.State{T: F + 1}},
		{"token_bucket decimal, whole µs", tb, fmt.Sprintf("1%015d%03d", F-epoch, 0), algorithm.State{T: F}},
		{"leaky_bucket decimal, absolute", lb, fmt.Sprintf("2%d", now+400_000), algorithm.State{T: now + 400_000}},
		{"leaky_bucket packed, absolute", lb, packed(2, float64(now+400_000)), algorithm.State{T: now + 400_000}},
		{"fixed_window packed, absolute", fw, packed(3, float64(now-now%conformance.Minute), 1500), algorithm.State{T: now - now%conformance.Minute, A: 1500}},
		{"sliding_window packed, absolute", sw, packed(4, float64(start), 4, 9), algorithm.State{T: start, A: 4, B: 9}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client := fmt.Sprintf("user:earlier-%d", i)
			if err := c.Do(ctx, c.B().Set().Key(redisstore.Key(s, client, "r")).Value(tc.set).Build()).Error(); err != nil {
				t.Fatal(err)
			}
			st := tc.st
			for step, at := range []int64{now, now, now + 1000, now + 400_000, now + 2*conformance.Second} {
				st = compareDecision(t, s, &clock, client, tc.p, st, at, 1+int64(step%2), fmt.Sprintf("step %d", step))
			}
		})
	}
	t.Run("sliding_log, one member per unit, absolute", func(t *testing.T) {
		p := algorithm.Params{Kind: algorithm.SlidingLog, Limit: 5, Window: conformance.Second}
		key := redisstore.Key(s, "user:earlier-log", "r")
		times := []int64{now - 900_000, now - 900_000, now - 500_000, now - 1}
		for n, at := range times {
			do(t, srv, "zadd", key, fmt.Sprint(at), fmt.Sprintf("%d.%d", at, n+1))
		}
		st := algorithm.State{Log: times}
		for step, at := range []int64{now, now, now + 100_000, now + 500_000, now + 600_000} {
			st = compareDecision(t, s, &clock, "user:earlier-log", p, st, at, 1+int64(step%2), fmt.Sprintf("step %d", step))
		}
	})
}

// TestStateOutsideDecimalRange: a state whose time falls outside the
// decimal form's range (before 2020-09-13, or from 2051) is stored packed,
// whichever way take.lua decided the call (a lone whole-µs token bucket is
// decided inline), and decided on from there as the Go function decides.
func TestStateOutsideDecimalRange(t *testing.T) {
	srv := redistest.Start(t)
	var clock atomic.Int64
	s := newStore(t, &clock, srv.Addr())
	c := redisstore.Client(s)
	ctx := context.Background()
	p := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 10, Window: conformance.Second} // a token of 100,000 µs
	for i, now := range []int64{conformance.Day, epoch - conformance.Second, epoch + 1_000_000_000_000_000} {
		client := fmt.Sprintf("user:range-%d", i)
		var st algorithm.State
		for step := range int64(3) {
			st = compareDecision(t, s, &clock, client, p, st, now+step*1000, 1, fmt.Sprintf("at %d step %d", now, step))
			v, err := c.Do(ctx, c.B().Get().Key(redisstore.Key(s, client, "r")).Build()).ToString()
			if err != nil {
				t.Fatal(err)
			}
			if v == "" || v[0] != 17 {
				t.Fatalf("at %d step %d: state %q, want it packed (first byte 17)", now, step, v)
			}
		}
	}
}
