package metrics

import (
	"strconv"
	"testing"
)

// TestEnvoyDetailBound: a descriptor key's per-value series stop at
// MaxDetailedValues, a label that is not UTF-8 never gets one (client_golang
// would panic on it), and a key dropped by SetEnvoyKeys gets none.
func TestEnvoyDetailBound(t *testing.T) {
	m := New()
	d := m.EnvoyDetail("d", "k")
	if d.Stats("k_\xff") != nil {
		t.Error("a label that is not UTF-8 got a series")
	}
	for i := range MaxDetailedValues {
		if d.Stats("k_"+strconv.Itoa(i)) == nil {
			t.Fatalf("value %d got no series", i)
		}
	}
	if d.Stats("k_more") != nil {
		t.Error("a value past the bound got a series")
	}
	if d.Stats("k_0") == nil {
		t.Error("a value with a series lost it")
	}
	m.SetEnvoyKeys(nil, nil)
	if d.Stats("k_0") != nil {
		t.Error("a dropped key still counts per value")
	}
}
