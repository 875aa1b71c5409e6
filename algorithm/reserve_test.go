package algorithm_test

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/testkit/conformance"
)

// TestFirstAllowedQueues grants reservation after reservation, each at the
// instant FirstAllowed names, and checks that the instant is exact (Apply
// allows there and not a microsecond earlier), that slots never go back in
// time, and that the calls sent at their slots, replayed into a new bucket
// in that order, are every one admitted: a reservation never grants what
// the bucket would not have.
func TestFirstAllowedQueues(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, k := range []algorithm.Kind{algorithm.TokenBucket, algorithm.LeakyBucket} {
		t.Run(k.String(), func(t *testing.T) {
			waited := 0
			for iter := 0; iter < 300; iter++ {
				p := conformance.RandomParams(r, k)
				var s algorithm.State
				now := conformance.Base + r.Int64N(conformance.Day)
				maxWait := min(3*p.Window, conformance.Hour)
				type sent struct{ at, cost int64 }
				var sends []sent
				for step := 0; step < 40; step++ {
					now += r.Int64N(p.Window/(4*p.Limit) + 2)
					cost := 1 + r.Int64N(p.Capacity())
					at, ok, err := algorithm.FirstAllowed(p, s, now, cost)
					if err != nil || !ok {
						t.Fatalf("%+v: FirstAllowed(now %d, cost %d) = %d, %v, %v; want an instant", p, now, cost, at, ok, err)
					}
					if at < now {
						t.Fatalf("%+v: slot %d before now %d", p, at, now)
					}
					if at-now > maxWait {
						continue // refused: nothing taken
					}
					res, ns := algorithm.Apply(p, s, at, cost)
					if !res.Allowed {
						t.Fatalf("%+v state %+v: Apply at the slot %d (cost %d) = %+v, want allowed", p, s, at, cost, res)
					}
					if at > now {
						waited++
						if early, _ := algorithm.Apply(p, s, at-1, cost); early.Allowed {
							t.Fatalf("%+v state %+v: Apply a µs before the slot %d allows: the slot is late", p, s, at)
						}
					}
					if len(sends) > 0 && at < sends[len(sends)-1].at {
						t.Fatalf("%+v: slot %d before the previous slot %d", p, at, sends[len(sends)-1].at)
					}
					s = ns
					sends = append(sends, sent{at, cost})
				}
				var replay algorithm.State
				for i, c := range sends {
					res, ns := algorithm.Apply(p, replay, c.at, c.cost)
					if !res.Allowed {
						t.Fatalf("%+v: call %d sent at its slot %d (cost %d) is denied on replay: %+v", p, i, c.at, c.cost, res)
					}
					replay = ns
				}
			}
			if waited == 0 {
				t.Fatal("no reservation had to wait: the test proves nothing")
			}
		})
	}
}

func TestFirstAllowedRefuses(t *testing.T) {
	for _, k := range []algorithm.Kind{algorithm.FixedWindow, algorithm.SlidingWindow, algorithm.SlidingLog} {
		p := algorithm.Params{Kind: k, Limit: 10, Window: conformance.Second}
		if _, _, err := algorithm.FirstAllowed(p, algorithm.State{}, conformance.Base, 1); !errors.Is(err, algorithm.ErrReserveKind) {
			t.Errorf("%s: err %v, want ErrReserveKind", k, err)
		}
	}
	p := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 10, Window: conformance.Second}
	if _, ok, err := algorithm.FirstAllowed(p, algorithm.State{}, conformance.Base, 11); ok || err != nil {
		t.Errorf("cost 11 over capacity 10: ok %v err %v, want false, nil", ok, err)
	}
}
