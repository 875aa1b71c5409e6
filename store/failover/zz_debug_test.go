package failover_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	sredis "github.com/sluicehq/sluice/store/redis"
)

func TestZZProbeTimes(t *testing.T) {
	srv := redistest.Start(t)
	cfg := sredis.DefaultConfig()
	cfg.Addrs = []string{srv.Addr()}
	s, err := sredis.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 10 {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := s.Probe(ctx, "x")
		cancel()
		t.Logf("probe %d: %v %v", i, time.Since(start), err)
	}
}
