package algorithm_test

import (
	"testing"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/testkit/conformance"
)

// TestConformance runs the shared tables against the pure functions, keeping
// the state the way a store does: written back only when Changed.
func TestConformance(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Bucket {
		var s algorithm.State
		return func(p algorithm.Params, now, cost int64) (algorithm.Result, error) {
			r, ns := algorithm.Apply(p, s, now, cost)
			if r.Changed {
				s = ns
			}
			return r, nil
		}
	})
}
