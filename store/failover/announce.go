package failover

import (
	"context"
	"time"
)

// announcer registers this instance in the shared store and keeps the last
// known live count through an outage.
func (s *Store) announcer() {
	defer s.done.Done()
	if s.cfg.Instances > 0 {
		return
	}
	tick, stop := s.cfg.Tick(s.cfg.AnnounceInterval)
	defer stop()
	s.announce()
	for {
		select {
		case <-s.stop:
			return
		case <-tick:
			if State(s.state.Load()) == Closed {
				s.announce()
			}
		}
	}
}

func (s *Store) announce() {
	b := s.primary.Load()
	if b == nil || s.cfg.InstanceID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(s.cfg.ProbeInterval, 100*time.Millisecond))
	defer cancel()
	if n, err := b.p.Announce(ctx, s.cfg.InstanceID, 3*s.cfg.AnnounceInterval); err == nil && n > 0 {
		if old := s.live.Swap(int64(n)); old != int64(n) {
			s.log.Info("failover: live instances", "count", n)
		}
	}
}
