package memory

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestTable drives a table with random inserts, removes and shrinks against
// a map, with hashes drawn from a small set so that runs collide and wrap.
func TestTable(t *testing.T) {
	for _, hashes := range []uint32{1, 7, 1 << 20} {
		t.Run(fmt.Sprintf("hashes=%d", hashes), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(hashes), 2))
			hashOf := func(k string) uint32 {
				var h uint32 = 2166136261
				for i := range len(k) {
					h = (h ^ uint32(k[i])) * 16777619
				}
				return h%hashes*0x9E3779B1 + 0xFFFF_FFF0 // also near the top of the range
			}
			tab := newTable("r")
			model := map[string]int64{} // client → value stored in entry.t
			for step := range 20000 {
				k := fmt.Sprintf("user:%d", rng.IntN(3000))
				h := hashOf(k)
				idx := tab.find(h, k)
				v, ok := model[k]
				if ok != (idx >= 0) {
					t.Fatalf("step %d: find(%q) = %d, want present %v", step, k, idx, ok)
				}
				switch {
				case ok && tab.ents[idx].t != v:
					t.Fatalf("step %d: %q holds %d, want %d", step, k, tab.ents[idx].t, v)
				case ok && rng.IntN(2) == 0:
					tab.remove(h, idx)
					delete(model, k)
				case !ok:
					idx = tab.insert(h, k)
					tab.ents[idx].t = int64(step)
					model[k] = int64(step)
				}
				if step%997 == 0 && rng.IntN(2) == 0 {
					// Empty most of it, then compact.
					for k := range model {
						if rng.IntN(10) != 0 {
							tab.remove(hashOf(k), tab.find(hashOf(k), k))
							delete(model, k)
						}
					}
					tab.shrink()
				}
				if tab.n != len(model) {
					t.Fatalf("step %d: n = %d, want %d", step, tab.n, len(model))
				}
			}
			for k, v := range model {
				if idx := tab.find(hashOf(k), k); idx < 0 || tab.ents[idx].t != v {
					t.Errorf("find(%q) = %d, want entry holding %d", k, idx, v)
				}
			}
		})
	}
}

func TestSizes(t *testing.T) {
	if got, want := unsafe.Sizeof(entry{}), uintptr(48); got != want {
		t.Errorf("entry is %d bytes, want %d", got, want)
	}
	if got, want := unsafe.Sizeof(shard{}), uintptr(128); got != want {
		t.Errorf("shard is %d bytes, want %d (two cache lines)", got, want)
	}
}
