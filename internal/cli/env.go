package cli

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluicehq/sluice/internal/envoyconf"
	"github.com/sluicehq/sluice/internal/rulestore"
)

// envPrefix starts the environment variable of every flag (docs/guide.md,
// "Commands").
const envPrefix = "SLUICE_"

// EnvName returns the environment variable that sets the flag named name:
// SLUICE_ and the name in upper snake case, e.g. --admin-listen is
// SLUICE_ADMIN_LISTEN.
func EnvName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// bindEnv sets every flag of cmd (its own and those it inherits) that was
// not given on the command line from its environment variable, when that
// variable is set and not empty: flags win over the environment, which wins
// over defaults. lookup is os.LookupEnv outside tests.
// Empty variables count as unset, so that `SLUICE_X= sluice ...` cannot
// turn a number or duration flag into an error. A value the flag does
// not accept is an error naming the variable.
func bindEnv(cmd *cobra.Command, lookup func(string) (string, bool)) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || f.Name == "help" {
			return
		}
		name := EnvName(f.Name)
		v, ok := lookup(name)
		if !ok || v == "" {
			return
		}
		if serr := cmd.Flags().Set(f.Name, v); serr != nil {
			err = fmt.Errorf("environment %s=%q: %v", name, v, serr)
		}
	})
	return err
}

// The environment of an envoyproxy/ratelimit deployment. `sluice serve`
// reads the variables envoyproxy/ratelimit reads, so that a deployment
// keeps working when its image is replaced by sluice's: each one sluice
// has the same thing for sets it (a flag, or a setting with no flag of
// its own), each one it cannot honour is refused at start naming it and
// why, and the rest are not needed (docs/envoy.md, "Environment"). A flag
// given on the command line or as SLUICE_<FLAG> wins over them. Variables
// set to "" count as unset, as SLUICE_ ones do.

// envoyDisposition says what sluice does with a variable.
type envoyDisposition uint8

const (
	envoyHonoured  envoyDisposition = iota // sluice does the same thing
	envoyRefused                           // set to a value other than its default, sluice refuses to start
	envoyNotNeeded                         // read and checked, with no effect
)

// envoyVar is one variable of envoyproxy/ratelimit's settings.
type envoyVar struct {
	name string
	// def is its default there; a refused variable set to it is
	// accepted ("" for none).
	def  string
	what envoyDisposition
	// as says, for docs/envoy.md, what sluice does with it.
	as string
}

// envoyVars lists every variable envoyproxy/ratelimit's settings read
// (src/settings/settings.go), in its order. TestEnvoyVarsDocumented keeps
// docs/envoy.md's table the same.
var envoyVars = []envoyVar{
	{"HOST", "0.0.0.0", envoyHonoured, "with PORT: --listen (the HTTP port: /json, /healthcheck, and sluice's /ratelimit/check, /metrics)"},
	{"PORT", "8080", envoyHonoured, "with HOST: --listen"},
	{"DEBUG_HOST", "0.0.0.0", envoyHonoured, "with DEBUG_PORT: --admin-listen, sluice's admin API (off loopback it needs --admin-token); default 127.0.0.1, not 0.0.0.0: the admin API changes rules"},
	{"DEBUG_PORT", "6070", envoyHonoured, "with DEBUG_HOST: --admin-listen, 127.0.0.1:6070 in an envoyproxy/ratelimit deployment (one that sets RUNTIME_SUBDIRECTORY, CONFIG_TYPE or REDIS_URL)"},
	{"GRPC_UDS", "", envoyRefused, "sluice listens on TCP only: use GRPC_HOST and GRPC_PORT"},
	{"GRPC_HOST", "0.0.0.0", envoyHonoured, "with GRPC_PORT: --grpc-listen"},
	{"GRPC_PORT", "8081", envoyHonoured, "with GRPC_HOST: --grpc-listen"},
	{"GRPC_MAX_CONNECTION_AGE", "24h", envoyRefused, "sluice closes idle gRPC connections (--idle-timeout) and never busy ones"},
	{"GRPC_MAX_CONNECTION_AGE_GRACE", "1h", envoyRefused, "as GRPC_MAX_CONNECTION_AGE"},
	{"GRPC_SERVER_USE_TLS", "false", envoyHonoured, "with GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY: --grpc-tls-cert, --grpc-tls-key (gRPC only; the HTTP port stays plain, as there)"},
	{"GRPC_SERVER_TLS_CERT", "", envoyHonoured, "--grpc-tls-cert, with GRPC_SERVER_USE_TLS=true"},
	{"GRPC_SERVER_TLS_KEY", "", envoyHonoured, "--grpc-tls-key, with GRPC_SERVER_USE_TLS=true"},
	{"GRPC_CLIENT_TLS_CACERT", "", envoyHonoured, "--grpc-tls-client-ca (mutual TLS), with GRPC_SERVER_USE_TLS=true"},
	{"GRPC_CLIENT_TLS_SAN", "", envoyRefused, "sluice checks that a client certificate is signed by the CA, not its subject alternative name"},
	{"LOG_LEVEL", "WARN", envoyHonoured, "--log-level (trace is debug; warning is warn; fatal and panic are error); default warn, as there"},
	{"LOG_FORMAT", "text", envoyHonoured, "--log-format: json, else text"},
	{"CONFIG_TYPE", "FILE", envoyHonoured, "FILE: the runtime directory; GRPC_XDS_SOTW: the RateLimitConfig resources of an xDS server (Envoy Gateway's), followed as they change"},
	{"FORCE_START_WITHOUT_INITIAL_CONFIG", "false", envoyHonoured, "GRPC_XDS_SOTW: true starts with no rules; false waits for a configuration that loads"},
	{"CONFIG_GRPC_XDS_NODE_ID", "default", envoyHonoured, "GRPC_XDS_SOTW: the node id sent to the xDS server"},
	{"CONFIG_GRPC_XDS_NODE_METADATA", "", envoyHonoured, "GRPC_XDS_SOTW: the node's metadata, key=value pairs separated by commas"},
	{"CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000", envoyHonoured, "GRPC_XDS_SOTW: the xDS server's host:port"},
	{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3s", envoyHonoured, "GRPC_XDS_SOTW: the wait before connecting again after the stream broke"},
	{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "", envoyHonoured, "GRPC_XDS_SOTW: gRPC metadata sent on the stream, key:value pairs separated by commas"},
	{"CONFIG_GRPC_XDS_SERVER_USE_TLS", "false", envoyHonoured, "GRPC_XDS_SOTW: TLS to the xDS server"},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "", envoyHonoured, "with CONFIG_GRPC_XDS_SERVER_USE_TLS: the client certificate (mutual TLS)"},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "", envoyHonoured, "with CONFIG_GRPC_XDS_SERVER_USE_TLS: its key"},
	{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "", envoyHonoured, "with CONFIG_GRPC_XDS_SERVER_USE_TLS: the CA the server's certificate is checked against (else the system's)"},
	{"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "", envoyHonoured, "with CONFIG_GRPC_XDS_SERVER_USE_TLS: the name the server's certificate must carry"},
	{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s", envoyNotNeeded, "sluice connects again every CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL"},
	{"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s", envoyNotNeeded, "as XDS_CLIENT_BACKOFF_INITIAL_INTERVAL"},
	{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.5", envoyNotNeeded, "as XDS_CLIENT_BACKOFF_INITIAL_INTERVAL"},
	{"XDS_CLIENT_BACKOFF_JITTER", "true", envoyNotNeeded, "as XDS_CLIENT_BACKOFF_INITIAL_INTERVAL"},
	{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "", envoyHonoured, "GRPC_XDS_SOTW: the largest response accepted"},
	{"USE_DOG_STATSD", "false", envoyRefused, "sluice exports Prometheus metrics (GET /metrics), no statsd"},
	{"USE_DOG_STATSD_MOGRIFIERS", "", envoyNotNeeded, "statsd only"},
	{"USE_STATSD", "true", envoyNotNeeded, "sluice sends no statsd; its metrics are Prometheus's (GET /metrics): true is accepted, as the default, and sends nothing"},
	{"STATSD_HOST", "localhost", envoyNotNeeded, "statsd only"},
	{"STATSD_PORT", "8125", envoyNotNeeded, "statsd only"},
	{"EXTRA_TAGS", "", envoyNotNeeded, "statsd only"},
	{"STATS_FLUSH_INTERVAL", "10s", envoyNotNeeded, "statsd only"},
	{"DISABLE_STATS", "false", envoyNotNeeded, "Prometheus metrics are read only when scraped"},
	{"USE_PROMETHEUS", "false", envoyHonoured, "with true, sluice's metrics are also served on PROMETHEUS_ADDR at PROMETHEUS_PATH (sluice's own metric names)"},
	{"PROMETHEUS_ADDR", ":9090", envoyHonoured, "with USE_PROMETHEUS=true"},
	{"PROMETHEUS_PATH", "/metrics", envoyHonoured, "with USE_PROMETHEUS=true"},
	{"PROMETHEUS_MAPPER_YAML", "", envoyNotNeeded, "it renames statsd metrics; sluice's are Prometheus's own"},
	{"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "false", envoyNotNeeded, "sluice's latency histograms are in seconds"},
	{"RUNTIME_ROOT", "/srv/runtime_data/current", envoyHonoured, "the runtime directory (with RUNTIME_SUBDIRECTORY)"},
	{"RUNTIME_SUBDIRECTORY", "", envoyHonoured, "set: the rules are the runtime directory's configuration, followed as it changes (instead of --rules)"},
	{"RUNTIME_APPDIRECTORY", "config", envoyHonoured, "the runtime directory's configuration directory"},
	{"RUNTIME_IGNOREDOTFILES", "false", envoyHonoured, "files and directories named .* are skipped (set it for a Kubernetes ConfigMap mount)"},
	{"RUNTIME_WATCH_ROOT", "true", envoyHonoured, "false: only the files under RUNTIME_APPDIRECTORY; true: also RUNTIME_APPDIRECTORY.* beside it, as there. sluice follows a change either way"},
	{"EXPIRATION_JITTER_MAX_SECONDS", "300", envoyNotNeeded, "sluice's keys expire when their bucket is full again, each on its own"},
	{"LOCAL_CACHE_SIZE_IN_BYTES", "0", envoyNotNeeded, "sluice always keeps a local cache of denials, and a raised limit is never masked by it"},
	{"NEAR_LIMIT_RATIO", "0.8", envoyHonoured, "the share of a limit past which the Envoy API's statistics count hits as near the limit"},
	{"CACHE_KEY_PREFIX", "", envoyHonoured, "starts every Redis key (before sluice's rl:)"},
	{"BACKEND_TYPE", "redis", envoyRefused, "redis only: sluice has no memcache store"},
	{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false", envoyNotNeeded, "sluice never counts a denied call, whatever its value"},
	{"LIMIT_RESPONSE_HEADERS_ENABLED", "false", envoyHonoured, "--envoy-ratelimit-headers"},
	{"LIMIT_LIMIT_HEADER", "RateLimit-Limit", envoyHonoured, "the name of the limit header LIMIT_RESPONSE_HEADERS_ENABLED adds"},
	{"LIMIT_REMAINING_HEADER", "RateLimit-Remaining", envoyHonoured, "the name of the remaining header"},
	{"LIMIT_RESET_HEADER", "RateLimit-Reset", envoyHonoured, "the name of the reset header"},
	{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "false", envoyHonoured, "/healthcheck fails while no domain is configured"},
	{"REDIS_SOCKET_TYPE", "unix", envoyHonoured, "tcp; unix is refused (sluice dials TCP); unset, REDIS_URL decides"},
	{"REDIS_TYPE", "SINGLE", envoyHonoured, "SINGLE or CLUSTER (any case): REDIS_URL's addresses to --redis, a cluster found by itself; SENTINEL is refused: sluice does not follow a sentinel"},
	{"REDIS_URL", "/var/run/nutcracker/ratelimit.sock", envoyHonoured, "--redis (host:port, or a comma-separated list of them)"},
	{"REDIS_POOL_SIZE", "10", envoyNotNeeded, "sluice pipelines every call on a few connections"},
	{"REDIS_AUTH", "", envoyHonoured, "--redis-password, or user:password to --redis-username and --redis-password"},
	{"REDIS_TLS", "false", envoyHonoured, "--redis-tls"},
	{"REDIS_TLS_CLIENT_CERT", "", envoyRefused, "sluice presents no client certificate to Redis"},
	{"REDIS_TLS_CLIENT_KEY", "", envoyRefused, "as REDIS_TLS_CLIENT_CERT"},
	{"REDIS_TLS_CACERT", "", envoyHonoured, "--redis-tls-ca"},
	{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "false", envoyRefused, "sluice always checks the Redis server's name"},
	{"REDIS_PIPELINE_WINDOW", "0", envoyHonoured, "--redis-batch-wait (at most 10ms; one server; a cluster ignores it)"},
	{"REDIS_PIPELINE_LIMIT", "0", envoyNotNeeded, "unused there too"},
	{"REDIS_CLUSTER_PIPELINE_PARALLELISM", "1", envoyNotNeeded, "sluice sends each shard its calls at once"},
	{"REDIS_PERSECOND", "false", envoyRefused, "sluice keeps every limit in one store"},
	{"REDIS_PERSECOND_SOCKET_TYPE", "unix", envoyNotNeeded, "only with REDIS_PERSECOND"},
	{"REDIS_PERSECOND_TYPE", "SINGLE", envoyNotNeeded, "only with REDIS_PERSECOND"},
	{"REDIS_PERSECOND_URL", "/var/run/nutcracker/ratelimitpersecond.sock", envoyNotNeeded, "only with REDIS_PERSECOND"},
	{"REDIS_PERSECOND_POOL_SIZE", "10", envoyNotNeeded, "only with REDIS_PERSECOND"},
	{"REDIS_PERSECOND_AUTH", "", envoyNotNeeded, "only with REDIS_PERSECOND"},
	{"REDIS_PERSECOND_TLS", "false", envoyNotNeeded, "only with REDIS_PERSECOND"},
	{"REDIS_SENTINEL_AUTH", "", envoyRefused, "as REDIS_TYPE=SENTINEL"},
	{"REDIS_PERSECOND_SENTINEL_AUTH", "", envoyNotNeeded, "only with REDIS_PERSECOND"},
	{"REDIS_PERSECOND_PIPELINE_WINDOW", "0", envoyNotNeeded, "only with REDIS_PERSECOND"},
	{"REDIS_PERSECOND_PIPELINE_LIMIT", "0", envoyNotNeeded, "only with REDIS_PERSECOND"},
	{"REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", "1", envoyNotNeeded, "only with REDIS_PERSECOND"},
	{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "false", envoyHonoured, "/healthcheck fails while Redis is unreachable"},
	{"REDIS_TIMEOUT", "10s", envoyNotNeeded, "sluice's breaker decides when Redis is too slow (--store-timeout, --probe-timeout)"},
	{"REDIS_PERSECOND_TIMEOUT", "10s", envoyNotNeeded, "only with REDIS_PERSECOND"},
	{"REDIS_POOL_ON_EMPTY_BEHAVIOR", "WAIT", envoyRefused, "WAIT only, as there (CREATE and ERROR stop it at start)"},
	{"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "WAIT", envoyNotNeeded, "only with REDIS_PERSECOND"},
	{"REDIS_STARTUP_INITIAL_INTERVAL", "1s", envoyNotNeeded, "sluice starts at once and serves from its local fallback until Redis answers"},
	{"REDIS_STARTUP_MAX_INTERVAL", "30s", envoyNotNeeded, "as REDIS_STARTUP_INITIAL_INTERVAL"},
	{"REDIS_STARTUP_MAX_ELAPSED_TIME", "0", envoyNotNeeded, "as REDIS_STARTUP_INITIAL_INTERVAL"},
	{"MEMCACHE_HOST_PORT", "", envoyNotNeeded, "memcache only (BACKEND_TYPE)"},
	{"MEMCACHE_MAX_IDLE_CONNS", "2", envoyNotNeeded, "memcache only"},
	{"MEMCACHE_SRV", "", envoyNotNeeded, "memcache only"},
	{"MEMCACHE_SRV_REFRESH", "0", envoyNotNeeded, "memcache only"},
	{"MEMCACHE_TLS", "false", envoyNotNeeded, "memcache only"},
	{"MEMCACHE_TLS_CLIENT_CERT", "", envoyNotNeeded, "memcache only"},
	{"MEMCACHE_TLS_CLIENT_KEY", "", envoyNotNeeded, "memcache only"},
	{"MEMCACHE_TLS_CACERT", "", envoyNotNeeded, "memcache only"},
	{"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "false", envoyNotNeeded, "memcache only"},
	{"SHADOW_MODE", "false", envoyHonoured, "every rule of the configuration is shadow: it never denies (a descriptor's own limit from Envoy still does)"},
	{"QUOTA_MODE", "false", envoyHonoured, "every rule of the configuration is quota (quota_mode)"},
	{"RESPONSE_DYNAMIC_METADATA", "false", envoyRefused, "sluice's answers carry no dynamic metadata"},
	{"MERGE_DOMAIN_CONFIG", "false", envoyHonoured, "files of one domain are merged"},
	{"TRACING_ENABLED", "false", envoyRefused, "sluice exports no traces"},
	{"TRACING_SERVICE_NAME", "RateLimit", envoyNotNeeded, "tracing only"},
	{"TRACING_SERVICE_NAMESPACE", "", envoyNotNeeded, "tracing only"},
	{"TRACING_SERVICE_INSTANCE_ID", "", envoyNotNeeded, "tracing only"},
	{"TRACING_EXPORTER_PROTOCOL", "http", envoyNotNeeded, "tracing only"},
	{"TRACING_SAMPLING_RATE", "1", envoyNotNeeded, "tracing only"},
}

// envoySettings are what the environment sets that has no flag.
type envoySettings struct {
	dir          *rulestore.EnvoyDirConfig // the runtime directory; nil: --rules
	xds          *rulestore.EnvoyXDSConfig // CONFIG_TYPE=GRPC_XDS_SOTW; nil: not
	healthConfig bool                      // HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED
	healthRedis  bool                      // REDIS_HEALTH_CHECK_ACTIVE_CONNECTION
	metricsAddr  string                    // PROMETHEUS_ADDR with USE_PROMETHEUS=true ("": none)
	metricsPath  string                    // PROMETHEUS_PATH
	keyPrefix    string                    // CACHE_KEY_PREFIX
	// headers are LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER and
	// LIMIT_RESET_HEADER ("": rls's defaults, the same).
	headers        [3]string
	nearLimitRatio float64 // NEAR_LIMIT_RATIO (0: rls's default, the same)
}

// envoyBool reads a boolean as envoyproxy/ratelimit's envconfig does
// (strconv.ParseBool).
func envoyBool(name, v string) (bool, error) {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("environment %s=%q: want true or false", name, v)
	}
	return b, nil
}

// readEnvoyEnv reads envoyproxy/ratelimit's variables (see envoyVars)
// onto serve's flags fl (each one not already set by a flag or its
// SLUICE_ variable) and into f.envoy. A variable sluice cannot honour, or
// a value it cannot read, is an error naming it. lookup is os.LookupEnv
// outside tests.
func readEnvoyEnv(fl *pflag.FlagSet, f *serveFlags, lookup func(string) (string, bool)) error {
	env := make(map[string]string)
	for _, v := range envoyVars {
		if s, ok := lookup(v.name); ok && s != "" {
			env[v.name] = s
		}
	}
	get := func(name string) string {
		if s, ok := env[name]; ok {
			return s
		}
		for _, v := range envoyVars {
			if v.name == name {
				return v.def
			}
		}
		return ""
	}
	flag := func(name, envName, value string) error {
		if fl.Changed(name) {
			return nil
		}
		if err := fl.Set(name, value); err != nil {
			return fmt.Errorf("environment %s: --%s %q: %v", envName, name, value, err)
		}
		return nil
	}
	on := func(name string) (bool, error) { return envoyBool(name, get(name)) }
	for _, v := range envoyVars {
		s, set := env[v.name]
		if v.what == envoyRefused && set && !strings.EqualFold(s, v.def) {
			return fmt.Errorf("environment %s=%q: not supported by sluice: %s (see docs/envoy.md, \"Environment\")", v.name, s, v.as)
		}
	}
	for _, name := range []string{"USE_STATSD", "DISABLE_STATS", "USE_PROMETHEUS", "RUNTIME_IGNOREDOTFILES", "RUNTIME_WATCH_ROOT",
		"MERGE_DOMAIN_CONFIG", "SHADOW_MODE", "QUOTA_MODE", "LIMIT_RESPONSE_HEADERS_ENABLED", "REDIS_TLS",
		"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "GRPC_SERVER_USE_TLS",
		"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "FORCE_START_WITHOUT_INITIAL_CONFIG"} {
		if _, err := on(name); err != nil {
			return err
		}
	}

	// Listeners.
	if env["HOST"] != "" || env["PORT"] != "" {
		if err := flag("listen", "HOST, PORT", net.JoinHostPort(get("HOST"), get("PORT"))); err != nil {
			return err
		}
	}
	if env["GRPC_HOST"] != "" || env["GRPC_PORT"] != "" {
		if err := flag("grpc-listen", "GRPC_HOST, GRPC_PORT", net.JoinHostPort(get("GRPC_HOST"), get("GRPC_PORT"))); err != nil {
			return err
		}
	}
	if env["DEBUG_HOST"] != "" || env["DEBUG_PORT"] != "" || envoyDeployment(env) {
		host := env["DEBUG_HOST"]
		if host == "" {
			host = "127.0.0.1"
		}
		if err := flag("admin-listen", "DEBUG_HOST, DEBUG_PORT", net.JoinHostPort(host, get("DEBUG_PORT"))); err != nil {
			return err
		}
	}
	if useTLS, _ := on("GRPC_SERVER_USE_TLS"); useTLS {
		for _, m := range [][2]string{{"grpc-tls-cert", "GRPC_SERVER_TLS_CERT"}, {"grpc-tls-key", "GRPC_SERVER_TLS_KEY"}, {"grpc-tls-client-ca", "GRPC_CLIENT_TLS_CACERT"}} {
			if s := env[m[1]]; s != "" {
				if err := flag(m[0], m[1], s); err != nil {
					return err
				}
			}
		}
		if env["GRPC_SERVER_TLS_CERT"] == "" || env["GRPC_SERVER_TLS_KEY"] == "" {
			return errors.New("environment GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY")
		}
	}

	// Logging: envoyproxy/ratelimit's levels are logrus's, WARN by default.
	if !fl.Changed("log-level") {
		lv := strings.ToLower(get("LOG_LEVEL"))
		switch lv {
		case "trace":
			lv = "debug"
		case "warning":
			lv = "warn"
		case "fatal", "panic":
			lv = "error"
		}
		if _, set := env["LOG_LEVEL"]; set || envoyDeployment(env) {
			if err := flag("log-level", "LOG_LEVEL", lv); err != nil {
				return err
			}
		}
	}
	if s, set := env["LOG_FORMAT"]; set {
		format := "text"
		if strings.EqualFold(s, "json") {
			format = "json"
		}
		if err := flag("log-format", "LOG_FORMAT", format); err != nil {
			return err
		}
	}

	// Configuration.
	merge, _ := on("MERGE_DOMAIN_CONFIG")
	shadow, _ := on("SHADOW_MODE")
	quota, _ := on("QUOTA_MODE")
	opt := envoyconf.Options{MergeDomains: merge, Shadow: shadow, Quota: quota}
	charge, err := envoyconf.ParseSelectors(f.obs.envoyCharge)
	if err != nil {
		return fmt.Errorf("--envoy-charge-after-response (SLUICE_ENVOY_CHARGE_AFTER_RESPONSE) %w", err)
	}
	opt.ChargeAfterResponse = charge
	xds := false
	switch ct := strings.ToUpper(get("CONFIG_TYPE")); ct {
	case "FILE":
	case "GRPC_XDS_SOTW":
		if fl.Changed("rules") {
			return fmt.Errorf("environment CONFIG_TYPE=GRPC_XDS_SOTW and --rules %s both name the rules: give one", f.rules)
		}
		x, err := readXDSEnv(env, get)
		if err != nil {
			return err
		}
		x.Options = opt
		f.envoy.xds, xds = x, true
	default:
		return fmt.Errorf("environment CONFIG_TYPE=%q: want FILE or GRPC_XDS_SOTW, as envoyproxy/ratelimit", ct)
	}
	if sub := env["RUNTIME_SUBDIRECTORY"]; sub != "" && !xds {
		if fl.Changed("rules") {
			return fmt.Errorf("environment RUNTIME_SUBDIRECTORY=%q and --rules %s both name the rules: give one", sub, f.rules)
		}
		ignoreDot, _ := on("RUNTIME_IGNOREDOTFILES")
		watchRoot, _ := on("RUNTIME_WATCH_ROOT")
		f.envoy.dir = &rulestore.EnvoyDirConfig{
			Root: get("RUNTIME_ROOT"), Subdirectory: sub, AppDirectory: get("RUNTIME_APPDIRECTORY"),
			AppDirectoryOnly: !watchRoot, IgnoreDotFiles: ignoreDot, Options: opt,
		}
	} else if !xds {
		if envoyDeployment(env) && !fl.Changed("rules") {
			return errors.New("environment: RUNTIME_SUBDIRECTORY is empty, and envoyproxy/ratelimit then loads no configuration at all: " +
				"set RUNTIME_ROOT and RUNTIME_SUBDIRECTORY to its runtime directory, CONFIG_TYPE=GRPC_XDS_SOTW for an xDS server, or --rules (SLUICE_RULES) for sluice's own rules")
		}
		for _, name := range []string{"MERGE_DOMAIN_CONFIG", "SHADOW_MODE", "QUOTA_MODE"} {
			if b, _ := on(name); b {
				return fmt.Errorf("environment %s=true applies to envoyproxy/ratelimit's configuration: set RUNTIME_SUBDIRECTORY (and RUNTIME_ROOT) to serve it", name)
			}
		}
		if len(opt.ChargeAfterResponse) > 0 {
			return errors.New("--envoy-charge-after-response (SLUICE_ENVOY_CHARGE_AFTER_RESPONSE) applies to envoyproxy/ratelimit's configuration: " +
				"set RUNTIME_SUBDIRECTORY (and RUNTIME_ROOT) to serve it, or write charge: after_response on the rules of a sluice rules file")
		}
	}
	f.envoy.healthConfig, _ = on("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED")
	f.envoy.healthRedis, _ = on("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION")
	if b, _ := on("USE_PROMETHEUS"); b {
		f.envoy.metricsAddr, f.envoy.metricsPath = get("PROMETHEUS_ADDR"), get("PROMETHEUS_PATH")
		if !strings.HasPrefix(f.envoy.metricsPath, "/") {
			return fmt.Errorf("environment PROMETHEUS_PATH=%q: want a path starting with /", f.envoy.metricsPath)
		}
	}
	if b, _ := on("LIMIT_RESPONSE_HEADERS_ENABLED"); b {
		if err := flag("envoy-ratelimit-headers", "LIMIT_RESPONSE_HEADERS_ENABLED", "true"); err != nil {
			return err
		}
	}

	// Redis.
	if u := env["REDIS_URL"]; u != "" {
		socket := strings.ToLower(env["REDIS_SOCKET_TYPE"])
		switch {
		case socket == "unix" || socket == "" && strings.HasPrefix(u, "/"):
			return fmt.Errorf("environment REDIS_URL=%q (REDIS_SOCKET_TYPE unix): not supported by sluice: it dials Redis over TCP: give REDIS_SOCKET_TYPE=tcp and REDIS_URL=host:port", u)
		case socket != "" && socket != "tcp":
			return fmt.Errorf("environment REDIS_SOCKET_TYPE=%q: want tcp (or unix, which sluice does not support)", env["REDIS_SOCKET_TYPE"])
		}
		switch t := strings.ToUpper(get("REDIS_TYPE")); t {
		case "SINGLE", "CLUSTER":
		case "SENTINEL":
			return errors.New("environment REDIS_TYPE=SENTINEL: not supported by sluice: it does not follow a Redis Sentinel; give a Redis server or a Redis Cluster")
		default:
			return fmt.Errorf("environment REDIS_TYPE=%q: want SINGLE, CLUSTER or SENTINEL, as envoyproxy/ratelimit", t)
		}
		if err := flag("redis", "REDIS_URL", u); err != nil {
			return err
		}
	} else if env["REDIS_TYPE"] != "" || env["REDIS_AUTH"] != "" {
		return errors.New("environment REDIS_TYPE or REDIS_AUTH without REDIS_URL: give REDIS_URL (host:port)")
	}
	if a := env["REDIS_AUTH"]; a != "" {
		user, pass, found := strings.Cut(a, ":")
		if !found {
			user, pass = "", a
		}
		if user != "" {
			if err := flag("redis-username", "REDIS_AUTH", user); err != nil {
				return err
			}
		}
		if err := flag("redis-password", "REDIS_AUTH", pass); err != nil {
			return err
		}
	}
	if b, _ := on("REDIS_TLS"); b {
		if err := flag("redis-tls", "REDIS_TLS", "true"); err != nil {
			return err
		}
	}
	if s := env["REDIS_TLS_CACERT"]; s != "" {
		if err := flag("redis-tls-ca", "REDIS_TLS_CACERT", s); err != nil {
			return err
		}
	}
	if s := env["REDIS_PIPELINE_WINDOW"]; s != "" && strings.ToUpper(get("REDIS_TYPE")) != "CLUSTER" {
		if err := flag("redis-batch-wait", "REDIS_PIPELINE_WINDOW", s); err != nil {
			return err
		}
	}
	f.envoy.keyPrefix = env["CACHE_KEY_PREFIX"]
	for i, name := range []string{"LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER"} {
		h := env[name]
		if h != "" && (strings.IndexFunc(h, func(c rune) bool { return c <= ' ' || c >= 0x7f || strings.ContainsRune("()<>@,;:\\\"/[]?={}", c) }) >= 0) {
			return fmt.Errorf("environment %s=%q: want a header name (letters, digits and !#$%%&'*+-.^_`|~)", name, h)
		}
		f.envoy.headers[i] = h
	}
	if s := env["NEAR_LIMIT_RATIO"]; s != "" {
		r, err := strconv.ParseFloat(s, 32)
		if err != nil || r <= 0 || r > 1 {
			return fmt.Errorf("environment NEAR_LIMIT_RATIO=%q: want a number above 0 and at most 1, e.g. 0.8", s)
		}
		f.envoy.nearLimitRatio = r
	}
	return nil
}

// readXDSEnv reads the settings of CONFIG_TYPE=GRPC_XDS_SOTW.
func readXDSEnv(env map[string]string, get func(string) string) (*rulestore.EnvoyXDSConfig, error) {
	x := &rulestore.EnvoyXDSConfig{ServerURL: get("CONFIG_GRPC_XDS_SERVER_URL"), NodeID: get("CONFIG_GRPC_XDS_NODE_ID")}
	var err error
	if x.ForceStart, err = envoyBool("FORCE_START_WITHOUT_INITIAL_CONFIG", get("FORCE_START_WITHOUT_INITIAL_CONFIG")); err != nil {
		return nil, err
	}
	if s := get("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL"); s != "" {
		if x.RetryInterval, err = time.ParseDuration(s); err != nil || x.RetryInterval <= 0 {
			return nil, fmt.Errorf("environment CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL=%q: want a duration such as 3s", s)
		}
	}
	if s := env["XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"]; s != "" {
		if x.MaxMsgSize, err = strconv.Atoi(s); err != nil || x.MaxMsgSize < 0 {
			return nil, fmt.Errorf("environment XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES=%q: want a number of bytes", s)
		}
	}
	// NODE_METADATA is key=value pairs; ADDITIONAL_HEADERS key:value pairs
	// (envconfig's map form), as envoyproxy/ratelimit reads them.
	pairs := func(name, sep string) (map[string]string, error) {
		m := make(map[string]string)
		for _, kv := range strings.Split(env[name], ",") {
			if kv == "" {
				continue
			}
			k, v, ok := strings.Cut(kv, sep)
			if !ok {
				if name == "CONFIG_GRPC_XDS_NODE_METADATA" {
					continue // ignored there
				}
				return nil, fmt.Errorf("environment %s: %q: want key%svalue pairs separated by commas", name, kv, sep)
			}
			m[k] = v
		}
		return m, nil
	}
	if x.NodeMetadata, err = pairs("CONFIG_GRPC_XDS_NODE_METADATA", "="); err != nil {
		return nil, err
	}
	if x.Headers, err = pairs("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", ":"); err != nil {
		return nil, err
	}
	if useTLS, err := envoyBool("CONFIG_GRPC_XDS_SERVER_USE_TLS", get("CONFIG_GRPC_XDS_SERVER_USE_TLS")); err != nil {
		return nil, err
	} else if useTLS {
		cfg, err := clientTLS(env["CONFIG_GRPC_XDS_SERVER_TLS_CACERT"], env["CONFIG_GRPC_XDS_CLIENT_TLS_CERT"], env["CONFIG_GRPC_XDS_CLIENT_TLS_KEY"],
			"environment CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "environment CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "environment CONFIG_GRPC_XDS_CLIENT_TLS_KEY")
		if err != nil {
			return nil, err
		}
		if cfg == nil {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		cfg.ServerName = env["CONFIG_GRPC_XDS_SERVER_TLS_SAN"]
		x.TLS = cfg
	}
	return x, nil
}

// envoyDeployment reports whether env is an envoyproxy/ratelimit
// deployment's: it names its configuration or its Redis. Its defaults
// (LOG_LEVEL warn) then apply.
func envoyDeployment(env map[string]string) bool {
	return env["RUNTIME_SUBDIRECTORY"] != "" || env["REDIS_URL"] != "" || env["CONFIG_TYPE"] != ""
}
