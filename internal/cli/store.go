package cli

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store/failover"
	"github.com/sluicehq/sluice/store/memory"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// closingStore is a limiter.Store the command must close.
type closingStore interface {
	limiter.Store
	Close() error
}

// openStore opens the counter store the flags name: Redis when --redis is
// set, else the embedded in-memory store. info reports its state for
// /readyz.
func openStore(f serveFlags, log *slog.Logger) (closingStore, func() map[string]any, error) {
	if f.redis == "" {
		cfg := memory.DefaultConfig()
		cfg.MaxBuckets, cfg.Logger = f.memoryMax, log
		if f.memoryMax < 1 {
			return nil, nil, fmt.Errorf("--memory-max-buckets must be ≥ 1, got %d", f.memoryMax)
		}
		st, err := memory.New(cfg)
		if err != nil {
			return nil, nil, fmt.Errorf("--memory-max-buckets: %w", err)
		}
		return st, func() map[string]any {
			return map[string]any{"kind": "memory", "state": "ok", "buckets": st.Len(),
				"max_buckets": st.MaxBuckets(), "evictions": st.Evictions()}
		}, nil
	}
	cfg := sredis.DefaultConfig()
	for _, a := range strings.Split(f.redis, ",") {
		if a = strings.TrimSpace(a); a != "" {
			cfg.Addrs = append(cfg.Addrs, a)
		}
	}
	cfg.Username, cfg.Password = f.redisUser, f.redisPass
	if f.redisTLS || f.redisTLSCA != "" {
		cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
		if f.redisTLSCA != "" {
			pem, err := os.ReadFile(f.redisTLSCA)
			if err != nil {
				return nil, nil, fmt.Errorf("serve: --redis-tls-ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, nil, fmt.Errorf("serve: --redis-tls-ca %s: no PEM certificate found", f.redisTLSCA)
			}
			cfg.TLS.RootCAs = pool
		}
	}
	// One denial cache for every client the failover store connects: what
	// Redis said holds through an outage and across reconnects.
	denials := sredis.NewDenialCache()
	cfg.Denials = denials
	var advised sync.Once
	connect := func(ctx context.Context) (failover.Primary, error) {
		st, err := sredis.New(cfg)
		if err != nil {
			return nil, err
		}
		advised.Do(func() {
			for _, a := range st.Advice(ctx) {
				log.Warn("redis settings: "+a, "see", "docs/redis.md#operating-redis")
			}
		})
		return st, nil
	}
	fo := failover.New(connect, failover.Config{
		Timeout:       f.storeTimeout,
		ProbeTimeout:  f.probeTimeout,
		ProbeInterval: f.probeInterval,
		Instances:     f.instances,
		InstanceID:    instanceID(),
		Logger:        log,
		Denials:       denials,
	})
	return fo, func() map[string]any {
		state, reason := fo.State()
		info := map[string]any{
			"kind":      "redis",
			"addrs":     cfg.Addrs,
			"state":     "ok",
			"breaker":   state.String(),
			"since":     fo.Since().UTC().Format(time.RFC3339Nano),
			"instances": fo.Instances(),
		}
		if state != failover.Closed {
			info["state"] = "degraded"
			info["reason"] = reason
		}
		info["local_denials"] = denials.Hits()
		st := fo.Stats()
		info["decisions"] = map[string]int64{
			"store": st.Store.Load(), "local_fallback": st.Fallback.Load(), "unavailable": st.Unavailable.Load(),
		}
		return info
	}, nil
}

// instanceID names this process in the shared live-instance registry.
func instanceID() string {
	host, _ := os.Hostname()
	var b [4]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s/%d/%x", host, os.Getpid(), b)
}

// The failover store asks the Redis stores' shared denial cache while Redis
// is unavailable.
var _ failover.LocalDenier = (*sredis.DenialCache)(nil)

// What metrics.Instrument reads from the stores serve opens.
var (
	_ metrics.BucketStore = (*memory.Store)(nil)
	_ metrics.Breaker     = (*failover.Store)(nil)
	_ metrics.LocalDenier = (*failover.Store)(nil)
	_ metrics.ErrorNamer  = (*failover.Store)(nil)
	_ metrics.ErrorNamer  = (*sredis.Store)(nil)
)
