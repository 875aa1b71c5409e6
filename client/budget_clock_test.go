package client

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/testkit/clocktest"
	"github.com/sluicehq/sluice/internal/testkit/limitertest"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/memory"
)

// delayedSluice is a real data plane (server, limiter, embedded store) whose
// store reads clk shifted by skew, in front of which each reservation's
// request takes delays[i][0] to arrive and its answer delays[i][1] to come
// back, on clk. It records each answer's send_at_us.
type delayedSluice struct {
	clk    *clocktest.Clock
	h      http.Handler
	delays [][2]time.Duration

	mu     sync.Mutex
	n      int
	sendAt []time.Time
}

func newDelayedSluice(t *testing.T, clk *clocktest.Clock, skew time.Duration, delays [][2]time.Duration) *delayedSluice {
	t.Helper()
	// 10 calls a second, one each 100 ms after the two of the burst.
	l, _ := limitertest.New(t, &rules.Set{Rules: []rules.Rule{{ID: "egress", Match: rules.Match{Plan: "egress"}, By: rules.ByUser,
		Limit: 10, Window: rules.Duration(time.Second), Algorithm: algorithm.LeakyBucket}}},
		memory.Config{Clock: func() int64 { return clk.Now().Add(skew).UnixMicro() }, SweepInterval: -1})
	return &delayedSluice{clk: clk, h: server.New(l, server.DefaultConfig()), delays: delays}
}

func (s *delayedSluice) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	d := s.delays[s.n%len(s.delays)]
	s.n++
	s.mu.Unlock()
	s.clk.Sleep(r.Context(), d[0])
	rec := httptest.NewRecorder()
	s.h.ServeHTTP(rec, r)
	var a struct {
		SendAtUS int64 `json:"send_at_us"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &a); err == nil && a.SendAtUS > 0 {
		s.mu.Lock()
		s.sendAt = append(s.sendAt, time.UnixMicro(a.SendAtUS))
		s.mu.Unlock()
	}
	s.clk.Sleep(r.Context(), d[1])
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}

// A reservation's answer takes time to come back, a different time each
// call: the Transport sends at the slot the answer names, not its wait
// after the answer arrived, so the calls keep the slots' spacing. With the
// store's clock on another machine, ahead or behind, the Transport learns
// the offset from the answers and keeps the spacing too: every call is sent
// the same offset from its slot, within the millisecond wait_ms is rounded
// to, once an answer has come back at once.
func TestBudgetSendsAtTheSlot(t *testing.T) {
	// Request and answer delays per reservation; the second comes back at
	// once, which pins the offset.
	delays := [][2]time.Duration{
		{10 * time.Millisecond, 20 * time.Millisecond},
		{0, 0},
		{5 * time.Millisecond, 30 * time.Millisecond},
		{20 * time.Millisecond, 5 * time.Millisecond},
		{time.Millisecond, 17*time.Millisecond + 300*time.Microsecond},
		{0, 43 * time.Millisecond},
	}
	for _, skew := range []time.Duration{0, 5 * time.Second, -5 * time.Second} {
		t.Run("store clock "+skew.String(), func(t *testing.T) {
			clk := clocktest.New(start.Add(123 * time.Microsecond))
			sl := newDelayedSluice(t, clk, skew, delays)
			slSrv := httptest.NewServer(sl)
			defer slSrv.Close()
			up := &counting{now: clk.Now}
			upSrv := httptest.NewServer(up)
			defer upSrv.Close()
			tr := NewTransport(nil)
			tr.now, tr.sleep = clk.Now, clk.Sleep
			tr.Budget = &Budget{Sluice: New(slSrv.URL)}
			c := &http.Client{Transport: tr}
			const calls = 12
			for range calls {
				if got := get(t, c, upSrv.URL); got != http.StatusOK {
					t.Fatalf("status %d", got)
				}
			}
			times, _ := up.arrivals()
			sl.mu.Lock()
			slots := sl.sendAt
			sl.mu.Unlock()
			if len(times) != calls || len(slots) != calls {
				t.Fatalf("upstream saw %d calls, sluice granted %d slots; want %d each", len(times), len(slots), calls)
			}
			var off time.Duration
			for i := range times {
				// the slot on the local clock, and how far from it the call went
				d := times[i].Sub(slots[i].Add(-skew))
				switch {
				case i == 0:
					// Its slot is now (the burst) and it learns of it
					// 20 ms later: sent at once, within the round trip.
					if d < -delays[0][0]-time.Millisecond || d > delays[0][1] {
						t.Errorf("call 0 sent %v from its slot, want within its round trip (-%v-1ms, +%v)", d, delays[0][0], delays[0][1])
					}
				case skew == 0 && d != 0:
					t.Errorf("call %d sent %v after its slot, want at it (same clock)", i, d)
				case i == 1:
					off = d
					if off < -time.Millisecond || off > time.Millisecond {
						t.Errorf("call 1 sent %v from its slot, want within 1ms (its answer came at once)", d)
					}
				case i > 1 && d != off:
					t.Errorf("call %d sent %v from its slot, want %v as call 1: the slots' spacing kept", i, d, off)
				}
			}
		})
	}
}

// However wrong an answer's send_at_us, the call is sent within what the
// answer's own round trip allows: no sooner than wait_ms − 1 ms after the
// request left, no later than wait_ms after the answer came.
func TestClockOffsetBounded(t *testing.T) {
	sent := start
	recv := start.Add(30 * time.Millisecond)
	wait := 200 * time.Millisecond
	for _, sendAt := range []time.Time{
		time.UnixMicro(1<<62 - 1), time.UnixMicro(1), time.UnixMicro(-1 << 62),
		start.Add(10 * 365 * 24 * time.Hour), start.Add(-10 * 365 * 24 * time.Hour),
	} {
		var o clockOffset
		for range 3 { // the first answer, and again once it is known
			got := o.local(sendAt, wait, sent, recv)
			if got.Before(sent.Add(wait-time.Millisecond)) || got.After(recv.Add(wait)) {
				t.Fatalf("send_at %v: sent at %v, want within [%v, %v]", sendAt, got, sent.Add(wait-time.Millisecond), recv.Add(wait))
			}
		}
	}
}
