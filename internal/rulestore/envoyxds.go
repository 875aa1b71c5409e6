package rulestore

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice/internal/envoyconf"
)

// RateLimitConfigType is the xDS type URL of envoyproxy/ratelimit's
// configuration resources (ratelimit.config.ratelimit.v3.RateLimitConfig),
// as Envoy Gateway serves them.
const RateLimitConfigType = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// EnvoyXDSConfig configures an EnvoyXDS: envoyproxy/ratelimit's
// CONFIG_TYPE=GRPC_XDS_SOTW settings, under its environment variables'
// names.
type EnvoyXDSConfig struct {
	// ServerURL is CONFIG_GRPC_XDS_SERVER_URL, host:port of the xDS
	// server. Required.
	ServerURL string
	// NodeID is CONFIG_GRPC_XDS_NODE_ID: the node the server sets its
	// snapshots for. Default "default".
	NodeID string
	// NodeMetadata is CONFIG_GRPC_XDS_NODE_METADATA, the node's metadata.
	NodeMetadata map[string]string
	// Headers is CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: gRPC metadata
	// sent with the stream.
	Headers map[string]string
	// TLS, when set, is the connection's (CONFIG_GRPC_XDS_SERVER_USE_TLS
	// and its files); nil: plain TCP.
	TLS *tls.Config
	// RetryInterval is CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL: the
	// wait before connecting again after the stream broke. Default 3s.
	RetryInterval time.Duration
	// MaxMsgSize is XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES (0: gRPC's 4 MiB).
	MaxMsgSize int
	// ForceStart is FORCE_START_WITHOUT_INITIAL_CONFIG: OpenEnvoyXDS
	// returns at once with no rules; else it waits for the first
	// configuration that loads.
	ForceStart bool
	// Options are the loader's (MERGE_DOMAIN_CONFIG, SHADOW_MODE, ...).
	Options envoyconf.Options
	// Logger and Now are as in FileConfig.
	Logger *slog.Logger
	Now    func() time.Time
}

// EnvoyXDS is a Source that serves the RateLimitConfig resources an xDS
// server sends (the state of the world, over the aggregated discovery
// service, as envoyproxy/ratelimit's GRPC_XDS_SOTW reads them): each
// response is loaded as that service loads its files (one resource, one
// file, named by its name; envoyconf.Load) and ACKed, or — when it does
// not load — NACKed with the reason, the last good rules staying in force
// (see envoyHead). A broken stream, or a server that is down, also keeps
// them: it is logged, shown in Status, and the client connects again
// every RetryInterval. Update is refused.
//
// Safe for concurrent use. Create one with OpenEnvoyXDS; Close it.
type EnvoyXDS struct {
	envoyHead
	cfg    EnvoyXDSConfig
	loaded atomic.Bool // some configuration is in force

	cancel context.CancelFunc
	done   chan struct{} // closed when the client has stopped
	first  chan struct{} // closed when the first configuration is in force
	once   sync.Once
}

var _ Source = (*EnvoyXDS)(nil)

// OpenEnvoyXDS starts the client and, unless cfg.ForceStart, waits until
// the first configuration is in force or ctx is done.
func OpenEnvoyXDS(ctx context.Context, cfg EnvoyXDSConfig) (*EnvoyXDS, error) {
	if cfg.ServerURL == "" {
		return nil, errors.New("rulestore: xDS: CONFIG_GRPC_XDS_SERVER_URL is empty: give the xDS server's host:port")
	}
	cfg.NodeID = cmp.Or(cfg.NodeID, "default")
	cfg.RetryInterval = cmp.Or(cfg.RetryInterval, 3*time.Second)
	cfg.Logger, cfg.Now, _ = runtimeDefaults(cfg.Logger, cfg.Now, nil)
	x := &EnvoyXDS{cfg: cfg, done: make(chan struct{}), first: make(chan struct{})}
	x.envoyHead = envoyHead{kind: "envoy-xds", location: cfg.ServerURL + " (node " + cfg.NodeID + ")", opt: cfg.Options, log: cfg.Logger, now: cfg.Now}
	x.st = Status{Kind: "envoy-xds", Location: x.location}
	if cfg.ForceStart {
		if err := x.load(nil, true); err != nil {
			return nil, err
		}
		x.loaded.Store(true)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	x.cancel = cancel
	go x.run(runCtx)
	if cfg.ForceStart {
		return x, nil
	}
	select {
	case <-x.first:
		return x, nil
	case <-ctx.Done():
		x.Close()
		return nil, fmt.Errorf("rulestore: xDS server %s: no configuration received: %w", x.location, ctx.Err())
	}
}

// run streams from the server until ctx is done, connecting again after
// each failure.
func (x *EnvoyXDS) run(ctx context.Context) {
	defer close(x.done)
	for {
		err := x.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		err = fmt.Errorf("rulestore: xDS server %s: %w; the last good configuration stays in force, connecting again every %s",
			x.location, err, x.cfg.RetryInterval)
		if x.loaded.Load() {
			x.fail("stream: "+err.Error(), err)
		} else {
			x.log.Warn("rulestore: waiting for the first envoyproxy/ratelimit configuration", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(x.cfg.RetryInterval):
		}
	}
}

// stream runs one ADS stream: it asks for the RateLimitConfig resources
// and loads, then ACKs or NACKs, every response.
func (x *EnvoyXDS) stream(ctx context.Context) error {
	creds := insecure.NewCredentials()
	if x.cfg.TLS != nil {
		creds = credentials.NewTLS(x.cfg.TLS)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if x.cfg.MaxMsgSize > 0 {
		opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(x.cfg.MaxMsgSize)))
	}
	conn, err := grpc.NewClient(x.cfg.ServerURL, opts...)
	if err != nil {
		return err
	}
	defer conn.Close()
	md := metadata.New(x.cfg.Headers)
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ctx, md))
	defer cancel()
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	fields := make(map[string]*structpb.Value, len(x.cfg.NodeMetadata))
	for k, v := range x.cfg.NodeMetadata {
		fields[k] = structpb.NewStringValue(v)
	}
	node := &corev3.Node{Id: x.cfg.NodeID, Metadata: &structpb.Struct{Fields: fields}}
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: RateLimitConfigType}); err != nil {
		return err
	}
	version := "" // of the configuration in force
	nacked := ""  // the version last refused
	for {
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		req := &discoveryv3.DiscoveryRequest{Node: node, TypeUrl: RateLimitConfigType, ResponseNonce: resp.GetNonce()}
		files, err := configFiles(resp)
		if err == nil {
			err = x.load(files, !x.loaded.Load())
		}
		if err != nil {
			if !x.loaded.Load() {
				x.log.Warn("rulestore: the xDS server's first configuration does not load; waiting for another", "error", err)
			}
			req.VersionInfo = version
			req.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
			// A server answers a NACK with what it holds: the same
			// version again, at once. Refuse it again, but once a retry
			// interval, not in a loop.
			if resp.GetVersionInfo() == nacked {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(x.cfg.RetryInterval):
				}
			}
			nacked = resp.GetVersionInfo()
		} else {
			version = resp.GetVersionInfo()
			req.VersionInfo = version
			if x.loaded.CompareAndSwap(false, true) {
				x.once.Do(func() { close(x.first) })
			}
		}
		if err := st.Send(req); err != nil {
			return err
		}
	}
}

// configFiles converts the RateLimitConfig resources of resp into the
// files envoyproxy/ratelimit would load: the same fields, in its YAML
// form (what its xDS provider does, and, like it, without quota_mode,
// metadata, value_to_metric and share_threshold, which the resource of
// this version does not carry).
func configFiles(resp *discoveryv3.DiscoveryResponse) ([]envoyconf.File, error) {
	files := make([]envoyconf.File, 0, len(resp.GetResources()))
	for i, res := range resp.GetResources() {
		var c rlsconfv3.RateLimitConfig
		if err := res.UnmarshalTo(&c); err != nil {
			return nil, fmt.Errorf("resource %d: want a %s: %w", i, RateLimitConfigType, err)
		}
		b, err := yaml.Marshal(yamlConfig{Domain: c.GetDomain(), Descriptors: yamlDescriptors(c.GetDescriptors())})
		if err != nil {
			return nil, fmt.Errorf("resource %d (%s): %w", i, c.GetName(), err)
		}
		files = append(files, envoyconf.File{Name: "xds:" + c.GetName(), Data: b})
	}
	// In the order of their names, as a runtime directory's files are: a
	// server may list the same resources in another order at each push.
	slices.SortStableFunc(files, func(a, b envoyconf.File) int { return cmp.Compare(a.Name, b.Name) })
	return files, nil
}

type yamlConfig struct {
	Domain      string           `yaml:"domain"`
	Descriptors []yamlDescriptor `yaml:"descriptors,omitempty"`
}

type yamlDescriptor struct {
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value,omitempty"`
	RateLimit      *yamlRateLimit   `yaml:"rate_limit,omitempty"`
	Descriptors    []yamlDescriptor `yaml:"descriptors,omitempty"`
	ShadowMode     bool             `yaml:"shadow_mode,omitempty"`
	DetailedMetric bool             `yaml:"detailed_metric,omitempty"`
}

type yamlRateLimit struct {
	Unit            string        `yaml:"unit"`
	RequestsPerUnit uint32        `yaml:"requests_per_unit"`
	Unlimited       bool          `yaml:"unlimited,omitempty"`
	Name            string        `yaml:"name,omitempty"`
	Replaces        []yamlReplace `yaml:"replaces,omitempty"`
}

type yamlReplace struct {
	Name string `yaml:"name"`
}

func yamlDescriptors(ds []*rlsconfv3.RateLimitDescriptor) []yamlDescriptor {
	var out []yamlDescriptor
	for _, d := range ds {
		y := yamlDescriptor{Key: d.GetKey(), Value: d.GetValue(), Descriptors: yamlDescriptors(d.GetDescriptors()),
			ShadowMode: d.GetShadowMode(), DetailedMetric: d.GetDetailedMetric()}
		if p := d.GetRateLimit(); p != nil {
			y.RateLimit = &yamlRateLimit{Unit: p.GetUnit().String(), RequestsPerUnit: p.GetRequestsPerUnit(),
				Unlimited: p.GetUnlimited(), Name: p.GetName()}
			for _, r := range p.GetReplaces() {
				y.RateLimit.Replaces = append(y.RateLimit.Replaces, yamlReplace{Name: r.GetName()})
			}
		}
		out = append(out, y)
	}
	return out
}

// Run waits until ctx is done or the EnvoyXDS is closed: the client runs
// from OpenEnvoyXDS to Close.
func (x *EnvoyXDS) Run(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-x.done:
		return nil
	}
}

// Close stops the client. It is safe to call more than once.
func (x *EnvoyXDS) Close() error {
	x.cancel()
	<-x.done
	return nil
}
