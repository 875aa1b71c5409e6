package cli

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
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
	if f.redisWait < 0 || f.redisWait > sredis.MaxBatchWait {
		return nil, nil, fmt.Errorf("--redis-batch-wait %s: want 0 (a call goes at once) up to %s", f.redisWait, sredis.MaxBatchWait)
	}
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
				"max_buckets": st.MaxBuckets(), "evictions": st.Evictions(), "overflows": st.Overflows()}
		}, nil
	}
	cfg := sredis.DefaultConfig()
	addrs, urlTLS, err := parseRedisAddrs(f.redis)
	if err != nil {
		return nil, nil, err
	}
	cfg.Addrs = addrs
	cfg.Username, cfg.Password = f.redisUser, f.redisPass
	cfg.BatchWait = f.redisWait
	cfg.RawIO = true // sluice's own: SLUICE_RAW_IO=0 turns it off (docs/redis.md)
	if f.envoy.keyPrefix != "" {
		cfg.KeyPrefix = f.envoy.keyPrefix + cfg.KeyPrefix
	}
	if f.redisTLS || urlTLS || f.redisTLSCA != "" {
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
		st, err := sredis.New(ctx, cfg)
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

// parseRedisAddrs parses the value of --redis: addresses separated by
// commas, each host:port or a redis:// or rediss:// URL (what users
// paste; rediss:// turns TLS on, tls reports it). An address that can
// never work — no host, no port or port 0, another scheme, a database
// other than 0, an empty entry — is an error naming --redis, so that
// sluice does not start degraded for ever on a typo. A password in a URL
// is refused: it belongs in SLUICE_REDIS_PASSWORD, out of ps.
func parseRedisAddrs(s string) (addrs []string, tls bool, err error) {
	entries := strings.Split(s, ",")
	for i, e := range entries {
		e = strings.TrimSpace(e)
		at := fmt.Sprintf("--redis %q", e)
		if len(entries) > 1 {
			at = fmt.Sprintf("--redis entry %d of %d (%q)", i+1, len(entries), e)
		}
		if e == "" {
			return nil, false, fmt.Errorf("%s is empty: give addresses as host:port separated by one comma, e.g. 10.0.1.1:6379,10.0.1.2:6379", at)
		}
		hostport := e
		if scheme, _, ok := strings.Cut(e, "://"); ok {
			u, perr := url.Parse(e)
			switch {
			case scheme != "redis" && scheme != "rediss":
				return nil, false, fmt.Errorf("%s: want host:port, redis://host:port or rediss://host:port (TLS), not %s://", at, scheme)
			case perr != nil:
				return nil, false, fmt.Errorf("%s: want redis://host:port: %v", at, perr)
			case u.User != nil:
				return nil, false, fmt.Errorf("%s: give the user as --redis-username and the password as SLUICE_REDIS_PASSWORD, not in the URL (every user of the machine reads the command line)", at)
			case u.Path != "" && u.Path != "/" && u.Path != "/0", u.RawQuery != "":
				return nil, false, fmt.Errorf("%s: sluice uses database 0 and takes no options: give redis://%s", at, u.Host)
			}
			hostport = u.Host
			if u.Port() == "" && u.Hostname() != "" {
				hostport = net.JoinHostPort(u.Hostname(), "6379")
			}
			tls = tls || scheme == "rediss"
		}
		host, port, serr := net.SplitHostPort(hostport)
		if serr != nil || host == "" {
			return nil, false, fmt.Errorf("%s: want host:port, e.g. 127.0.0.1:6379 (or redis://127.0.0.1:6379)", at)
		}
		if n, perr := strconv.Atoi(port); perr != nil || n < 1 || n > 65535 {
			return nil, false, fmt.Errorf("%s: port %q: want 1 … 65535", at, port)
		}
		addrs = append(addrs, hostport)
	}
	return addrs, tls, nil
}

// What metrics.Instrument reads from the stores serve opens.
var (
	_ metrics.BucketStore = (*memory.Store)(nil)
	_ metrics.Breaker     = (*failover.Store)(nil)
	_ metrics.LocalDenier = (*failover.Store)(nil)
	_ metrics.ErrorNamer  = (*failover.Store)(nil)
	_ metrics.ErrorNamer  = (*sredis.Store)(nil)
)
