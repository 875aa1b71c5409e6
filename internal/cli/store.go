package cli

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"github.com/sluicehq/sluice/limiter"
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
func openStore(f serveFlags) (closingStore, func() map[string]any, error) {
	if f.redis == "" {
		st, err := memory.New(memory.DefaultConfig())
		if err != nil {
			return nil, nil, err
		}
		return st, func() map[string]any {
			return map[string]any{"kind": "memory", "state": "ok", "buckets": st.Len()}
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
	st, err := sredis.New(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("serve: %w", err)
	}
	return st, func() map[string]any {
		return map[string]any{"kind": "redis", "addrs": cfg.Addrs, "state": "ok", "local_denials": st.LocalDenials()}
	}, nil
}
