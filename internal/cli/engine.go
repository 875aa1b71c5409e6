package cli

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/pflag"

	"github.com/sluicehq/sluice/internal/gctune"
	"github.com/sluicehq/sluice/internal/rulestore"
	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/store/memory"
)

// addEngineFlags registers on fl the flags serve and gateway share: the
// rules store, the counter store, IPv6 keying, logging, shutdown, and
// their listeners' TLS and limits (listen.go). Both commands register them
// here and nowhere else, so they have the same names, defaults and help
// (TestEngineFlagsMatchServe checks the two commands).
func addEngineFlags(fl *pflag.FlagSet, f *serveFlags) {
	fl.StringVar(&f.rules, "rules", "sluice-rules.yaml", "rules store: a YAML file path, or a postgres:// URL (see docs/fleet.md)")
	fl.DurationVar(&f.rulesPoll, "rules-poll", time.Second, "how often the rules file is checked for hand edits")
	addRulesStoreFlags(fl, &f.rulesStore)
	fl.StringVar(&f.redis, "redis", "", "Redis address(es), host:port or redis://host:port (rediss:// for TLS), comma-separated; a cluster is detected; empty: embedded in-memory store")
	fl.StringVar(&f.redisUser, "redis-username", "", "Redis ACL user")
	fl.StringVar(&f.redisPass, "redis-password", "", "Redis password (prefer SLUICE_REDIS_PASSWORD)")
	fl.BoolVar(&f.redisTLS, "redis-tls", false, "connect to Redis with TLS")
	fl.StringVar(&f.redisTLSCA, "redis-tls-ca", "", "PEM file of the CA that signed the Redis server certificate (implies --redis-tls)")
	fl.DurationVar(&f.redisWait, "redis-batch-wait", 0, "with --redis (one server): how long a call that would start a script run waits for others to share it, 0 to 10ms (0: it goes at once); fewer runs cost Redis less per decision, each call up to this much latency")
	fl.DurationVar(&f.storeTimeout, "store-timeout", 5*time.Millisecond, "how long a call to the shared store may go unanswered before the breaker probes Redis on a connection of its own (the call keeps waiting for Redis's answer)")
	fl.DurationVar(&f.probeTimeout, "probe-timeout", 100*time.Millisecond, "how long a probe of the shared store may go unanswered (in this process's running time) before the breaker opens")
	fl.DurationVar(&f.probeInterval, "probe-interval", 250*time.Millisecond, "how often a failing shared store is probed (and the Retry-After of fail-closed denials meanwhile)")
	fl.IntVar(&f.memoryMax, "memory-max-buckets", memory.DefaultMaxBuckets, "most buckets the embedded in-memory store holds, each about 85 bytes of Go heap (the default: about 80 MiB of heap, 140 MiB of process memory); past it, only full (idle) buckets are dropped, and new callers share one overflow bucket per rule")
	fl.IntVar(&f.instances, "instances", 0, "number of sluice instances the local fallback divides limits by (0: count them in Redis)")
	fl.IntVar(&f.ipv6Prefix, "ipv6-prefix", 64, "prefix length IPv6 callers are keyed by, 1 to 128")
	fl.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fl.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	addAccessLogFlags(fl, &f.obs)
	fl.IntVar(&f.gcFloorMiB, "gc-floor-mib", 64, "heap size (MiB) below which the garbage collector is not run more often (0: Go's default pacing; GOGC or GOMEMLIMIT in the environment win)")
	fl.DurationVar(&f.shutdown, "shutdown-timeout", 10*time.Second, "how long to let in-flight calls finish on SIGTERM")
	addListenFlags(fl, &f.net)
}

// checkSecrets refuses a blank or malformed value of the secret flags
// serve and gateway share (--redis-password), naming the flag.
func (f *serveFlags) checkSecrets() error {
	return checkSecret("redis-password", f.redisPass)
}

// engine is what decides calls, as serve and gateway open it from their
// flags: the logger, the rules source (kept in force on the limiter) and
// the counter store. Close it when done.
type engine struct {
	log       *slog.Logger
	gc        *gctune.Tuner
	src       rulestore.Source
	store     closingStore
	storeInfo func() map[string]any
	lim       *limiter.Limiter
}

// openEngine opens the rules store and the counter store f names and
// returns a limiter with the rules in force, following every change of
// them. instrument, when set, wraps the counter store before the limiter
// uses it (serve's metrics).
func openEngine(ctx context.Context, f serveFlags, instrument func(*slog.Logger, rulestore.Source, limiter.Store) limiter.Store) (*engine, error) {
	log, err := newLogger(f.logLevel, f.logFormat)
	if err != nil {
		return nil, err
	}
	if f.gcFloorMiB < 0 {
		return nil, fmt.Errorf("--gc-floor-mib must be ≥ 0, got %d", f.gcFloorMiB)
	}
	if f.ipv6Prefix < 1 || f.ipv6Prefix > 128 {
		// The limiter would quietly use /64 for these.
		return nil, fmt.Errorf("--ipv6-prefix %d: want a prefix length from 1 to 128 (64, the default, keys each IPv6 caller by its /64)", f.ipv6Prefix)
	}
	var src rulestore.Source
	if d := f.envoy.dir; d != nil {
		cfg := *d
		cfg.PollInterval, cfg.Logger = f.rulesPoll, log
		src, err = rulestore.OpenEnvoyDir(cfg)
	} else if x := f.envoy.xds; x != nil {
		cfg := *x
		cfg.Logger = log
		src, err = rulestore.OpenEnvoyXDS(ctx, cfg)
	} else {
		src, err = openRules(ctx, f.rules, f.rulesPoll, f.rulesStore, log)
	}
	if err != nil {
		return nil, err
	}
	store, storeInfo, err := openStore(f, log)
	if err != nil {
		src.Close()
		return nil, err
	}
	var decided limiter.Store = store
	if instrument != nil {
		decided = instrument(log, src, store)
	}
	lim := limiter.New(decided, limiter.Config{IPv6Prefix: f.ipv6Prefix})
	rulestore.Follow(src, lim.SetRules, log)
	gc := gctune.Floor(uint64(f.gcFloorMiB) << 20)
	return &engine{log: log, gc: gc, src: src, store: store, storeInfo: storeInfo, lim: lim}, nil
}

// ready is the /readyz verdict: ready as soon as rules are loaded, with the
// rules source's and the store's state. A broken edit of the rules file
// leaves the last good rules in force, so it is reported but still ready;
// so is a refused rules database (replaced, or at an older revision:
// rules.refused), since taking every instance of a fleet out of its load
// balancer would turn it into an outage.
func (e *engine) ready() (bool, map[string]any) {
	st := e.src.Status()
	rs := map[string]any{"source": st.Kind, "location": st.Location, "revision": st.Revision}
	if st.Database != "" {
		rs["database"] = st.Database
	}
	if st.Error != "" {
		rs["error"] = st.Error
		rs["error_at"] = st.ErrorAt
	}
	if st.Refused {
		rs["refused"] = true
	}
	return true, map[string]any{"rules": rs, "store": e.storeInfo()}
}

// Close closes the store and the rules source.
func (e *engine) Close() error {
	e.gc.Stop()
	err := e.store.Close()
	if cerr := e.src.Close(); err == nil {
		err = cerr
	}
	return err
}
